"""Games between two USI engines: alternating colours, each engine its own search limit, exact arbitration.

The arbiter keeps its own board and judges every game end with `engine.core.rules.terminal`: mate (no
legal moves), repetition (sennichite draw, perpetual check loses) and the move limit (draw).
Declaring a nyugyoku win (`bestmove win`) wins only if `Board.is_nyugyoku()` agrees, otherwise it
loses like an illegal move; `bestmove resign` loses. An engine that crashes or exceeds the move
timeout loses that game and is restarted for the next one. Engines are started once per match
(usinewgame between games) and always told to quit. Games start from openings (USI position lines
or random legal plies from the start), each played twice with colours swapped, so deterministic
engines still play distinct, colour-balanced games.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cshogi
from cshogi import CSA
from tqdm import tqdm

from engine.core.rules import DEFAULT_MAX_MOVES, MAX_MOVES, SENNICHITE, game_terminal
from engine.errors import UserError
from engine.fileio import atomic_write
from engine.match.elo import EloEstimate, elo_estimate
from engine.match.openings import Opening, game_opening, opening_board
from engine.usi_client import DEFAULT_MOVE_TIMEOUT, EngineFailure, EngineSpec, GoLimit, UsiProcess, started

CSA_END = {
    "checkmate": "%TSUMI",
    "resign": "%TORYO",
    "nyugyoku": "%KACHI",
    "illegal move": "%ILLEGAL_MOVE",
    "illegal declaration": "%ILLEGAL_MOVE",
    "perpetual check": "%ILLEGAL_MOVE",
    "sennichite": "%SENNICHITE",
    "max moves": "%JISHOGI",
    "timeout": "%TIME_UP",
    "crash": "%CHUDAN",
}


# ----- one game -----


@dataclass
class Game:
    opening: Opening
    black: int  # which engine (0 or 1) plays Black
    moves: list[str] = field(default_factory=list)  # played after the opening
    scores: list[str | None] = field(default_factory=list)
    winner: int | None = None  # cshogi.BLACK / cshogi.WHITE, None for a draw
    reason: str = ""

    @property
    def first_score(self) -> float:
        """Engine 0's score: 1 win, 0.5 draw, 0 loss."""
        if self.winner is None:
            return 0.5
        return 1.0 if (self.winner == cshogi.BLACK) == (self.black == 0) else 0.0


def _terminal_reason(
    board: cshogi.Board, occurrences: dict[int, int], max_moves: int
) -> tuple[int | None, str] | None:
    """(winner, reason) if the arbiter ends the game here, by the official rules (four-fold sennichite;
    nyugyoku only by declaration)."""
    t = game_terminal(board, occurrences, max_moves)
    if t is None:
        return None
    if t.reason == SENNICHITE:
        return t.winner, "sennichite" if t.winner is None else "perpetual check"
    if t.reason == MAX_MOVES:
        return None, "max moves"
    return t.winner, "checkmate"


def play_game(
    engines: Sequence[UsiProcess],
    opening: Opening,
    black: int,
    limits: Sequence[GoLimit],
    max_moves: int,
) -> Game:
    """One game; engine `black` moves first, each engine searching with its own limit (`limits[i]` for
    `engines[i]`). Engine failures end the game as a loss for that side."""
    game = Game(opening, black)
    board = opening_board(opening.position)
    occurrences = Counter([board.zobrist_hash()])  # the opening's own positions count too
    for usi in opening.moves:
        board.push_usi(usi)
        occurrences[board.zobrist_hash()] += 1
    for e in engines:
        e.usinewgame()
    while True:
        end = _terminal_reason(board, occurrences, max_moves)
        if end is not None:
            game.winner, game.reason = end
            break
        turn = board.turn
        side = black if turn == cshogi.BLACK else 1 - black
        engine = engines[side]
        try:
            engine.position([*opening.moves, *game.moves], opening.position)
            bestmove, _ = engine.go(**limits[side].settings())
        except EngineFailure as e:
            game.winner, game.reason = cshogi.opponent(turn), "timeout" if e.timed_out else "crash"
            engine.restart()
            break
        if bestmove == "resign":
            game.winner, game.reason = cshogi.opponent(turn), "resign"
            break
        if bestmove == "win":
            ok = board.is_nyugyoku()
            game.winner, game.reason = (
                (turn, "nyugyoku") if ok else (cshogi.opponent(turn), "illegal declaration")
            )
            break
        move = board.move_from_usi(bestmove)
        if not move or not board.is_legal(move):
            game.winner, game.reason = cshogi.opponent(turn), "illegal move"
            game.moves.append(bestmove)
            break
        board.push(move)
        occurrences[board.zobrist_hash()] += 1
        game.moves.append(bestmove)
        game.scores.append(engine.last_score)
    for i, e in enumerate(engines):
        with contextlib.suppress(EngineFailure):
            score = game.first_score if i == 0 else 1 - game.first_score
            e.gameover({1.0: "win", 0.0: "lose"}.get(score, "draw"))
    return game


# ----- records -----


def csa_score_comment(score: str | None, turn: int) -> str | None:
    """A USI `cp N` / `mate N` score of the mover as floodgate's `** N` comment (Black's view)."""
    if not score:
        return None
    kind, _, value = score.partition(" ")
    try:
        cp = int(value) if kind == "cp" else (-100000 if value.startswith("-") else 100000)
    except ValueError:
        return None
    return f"** {cp if turn == cshogi.BLACK else -cp}"


def write_csa(path: Path, game: Game, names: Sequence[str]) -> None:
    """One game as a CSA file, written atomically. The record starts after the opening (its moves are
    named in a comment), so converters do not learn the opening's random moves as good play."""
    board = game.opening.board()
    with atomic_write(path, "w") as f:
        exporter = CSA.Exporter()
        exporter.f = f
        black_name, white_name = (names[0], names[1]) if game.black == 0 else (names[1], names[0])
        opening = f"; opening: {' '.join(game.opening.moves)}" if game.opening.moves else ""
        exporter.info(board.copy(), [black_name, white_name], comment=f"result: {game.reason}{opening}")
        for usi, score in zip(game.moves, game.scores, strict=False):
            move = board.move_from_usi(usi)
            if not move or not board.is_legal(move):
                break  # the illegal last move is named by the end code
            exporter.move(move, comment=csa_score_comment(score, board.turn))
            board.push(move)
        exporter.endgame(CSA_END[game.reason])


# ----- the match -----


@dataclass
class MatchResult:
    names: tuple[str, str]
    games: list[Game] = field(default_factory=list)

    @property
    def wins(self) -> int:
        return sum(g.first_score == 1.0 for g in self.games)

    @property
    def losses(self) -> int:
        return sum(g.first_score == 0.0 for g in self.games)

    @property
    def draws(self) -> int:
        return sum(g.first_score == 0.5 for g in self.games)

    @property
    def elo(self) -> EloEstimate:
        return elo_estimate(self.wins, self.losses, self.draws)

    def summary(self) -> dict[str, Any]:
        e = self.elo
        return {
            "engine1": self.names[0],
            "engine2": self.names[1],
            "games": len(self.games),
            "wins": e.wins,
            "losses": e.losses,
            "draws": e.draws,
            "score": e.score,
            "elo": e.elo,
            "elo_error95": e.error95,
            "los": e.los,
            "reasons": dict(Counter(g.reason for g in self.games)),
            "mean_plies": sum(len(g.opening.moves) + len(g.moves) for g in self.games)
            / max(len(self.games), 1),
        }

    def __str__(self) -> str:
        return f"{self.names[0]} vs {self.names[1]}: {self.elo}"


def play_match(
    engines: Sequence[UsiProcess],
    games: int,
    limits: Sequence[GoLimit],
    max_moves: int = DEFAULT_MAX_MOVES,
    openings: Sequence[Opening] = (Opening(),),
    csa_dir: str | os.PathLike | None = None,
    sfen_path: str | os.PathLike | None = None,
    progress: bool = True,
    paired: bool = True,
) -> MatchResult:
    """`games` games between two started engines, engine 0 Black in even games, engine i searching each
    move with `limits[i]`. Opening k is used by
    games 2k and 2k+1 (cycling) when `paired`, else by game k alone (for data generation, where a
    deterministic engine would replay the same game with colours swapped). Records: one CSA file per
    game; one `position ...` line per game."""
    if games < 1:
        raise UserError(f"--games must be >= 1, got {games}")
    if len(limits) != 2:
        raise ValueError("a match needs a search limit for each engine")
    for i, limit in enumerate(limits):
        limit.validate(i)
    if not openings:
        raise UserError("no openings")
    result = MatchResult((engines[0].name, engines[1].name))
    sfen_file = open(sfen_path, "a") if sfen_path else None  # noqa: SIM115 (closed in finally)
    try:
        with tqdm(total=games, unit="game", disable=not progress, dynamic_ncols=True) as bar:
            for i in range(games):
                opening = game_opening(openings, i, paired)
                game = play_game(engines, opening, i % 2, limits, max_moves)
                result.games.append(game)
                if csa_dir is not None:
                    write_csa(Path(csa_dir) / f"game-{i + 1:04d}.csa", game, result.names)
                if sfen_file is not None:
                    sfen_file.write(opening.usi(game.moves) + "\n")
                    sfen_file.flush()
                e = result.elo
                bar.set_postfix_str(f"+{e.wins} -{e.losses} ={e.draws} Elo {e.elo:+.0f}", refresh=False)
                bar.update(1)
    finally:
        if sfen_file is not None:
            sfen_file.close()
    return result


def run_match(
    specs: Sequence[EngineSpec],
    games: int,
    limits: Sequence[GoLimit],
    timeout: float = DEFAULT_MOVE_TIMEOUT,
    **kwargs: Any,
) -> MatchResult:
    """Start both engines, play the match, quit them."""
    if len(specs) != 2:
        raise ValueError("a match needs two engines")
    with started(specs, timeout) as engines:
        return play_match(engines, games, limits, **kwargs)
