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
import queue
import signal
import threading
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cshogi
from cshogi import CSA
from tqdm import tqdm

from engine.core.rules import DEFAULT_MAX_MOVES, MAX_MOVES, SENNICHITE, game_terminal
from engine.errors import UserError
from engine.fileio import atomic_write
from engine.match.elo import EloEstimate, elo_estimate, pair_error95
from engine.match.openings import Opening, game_opening, opening_board
from engine.match.sprt import GAME_SCORES, PAIR_SCORES, Sprt, outcome_counts, pair_scores
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
    number: int = 0  # in the match, from 0: games 2k and 2k+1 share an opening when paired
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
    number: int = 0,
) -> Game:
    """One game; engine `black` moves first, each engine searching with its own limit (`limits[i]` for
    `engines[i]`). Engine failures end the game as a loss for that side."""
    game = Game(opening, black, number)
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
    paired: bool = True  # games 2k and 2k+1 share an opening, colours swapped
    sprt: Sprt | None = None
    stopped: str | None = None  # the test's decision that stopped the match (games then in play finish)

    @property
    def scores(self) -> list[float]:
        return [g.first_score for g in self.games]

    @property
    def pair_scores(self) -> list[float]:
        return pair_scores({g.number: g.first_score for g in self.games})

    @property
    def pentanomial(self) -> list[int] | None:
        """Finished pairs by engine 1's points in them: [0, 0.5, 1, 1.5, 2] (None when unpaired)."""
        return outcome_counts(self.pair_scores, PAIR_SCORES) if self.paired else None

    @property
    def llr(self) -> float | None:
        """The SPRT's log-likelihood ratio over finished pairs (over games when unpaired)."""
        if self.sprt is None:
            return None
        if self.paired:
            return self.sprt.llr(self.pentanomial, PAIR_SCORES)
        return self.sprt.llr(outcome_counts(self.scores, GAME_SCORES), GAME_SCORES)

    @property
    def decision(self) -> str | None:
        """'H1' / 'H0' once the test has decided (the decision stands when games still in play when it
        was made move the LLR back), None before or without a test."""
        llr = self.llr
        return self.stopped or (None if llr is None else self.sprt.decision(llr))

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
            **self._pairs_summary(),
            **self._sprt_summary(),
            "reasons": dict(Counter(g.reason for g in self.games)),
            "mean_plies": sum(len(g.opening.moves) + len(g.moves) for g in self.games)
            / max(len(self.games), 1),
        }

    def _pairs_summary(self) -> dict[str, Any]:
        if not self.paired:
            return {}
        return {"pentanomial": self.pentanomial, "elo_error95_pairs": pair_error95(self.pair_scores)}

    def _sprt_summary(self) -> dict[str, Any]:
        if self.sprt is None:
            return {}
        t = self.sprt
        bounds = {"lower": t.lower, "upper": t.upper, "llr": self.llr, "decision": self.decision}
        return {"sprt": {"elo0": t.elo0, "elo1": t.elo1, "alpha": t.alpha, "beta": t.beta, **bounds}}

    def __str__(self) -> str:
        lines = [f"{self.names[0]} vs {self.names[1]}: {self.elo}"]
        if self.paired and len(self.games) >= 4:
            lines.append(
                f"pairs {len(self.pair_scores)}, pentanomial {self.pentanomial} (LL to WW), "
                f"Elo +/- {pair_error95(self.pair_scores):.1f} from pairs"
            )
        if self.sprt is not None:
            t = self.sprt
            verdict = {"H1": "H1 accepted", "H0": "H0 accepted", None: "no decision"}[self.decision]
            lines.append(
                f"SPRT elo0 {t.elo0:g} elo1 {t.elo1:g} (alpha {t.alpha:g}, beta {t.beta:g}): "
                f"LLR {self.llr:.2f} in ({t.lower:.2f}, {t.upper:.2f}): {verdict} after {len(self.games)} "
                "games"
            )
        return "\n".join(lines)


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
    sprt: Sprt | None = None,
) -> MatchResult:
    """`games` games between two engines, engine 1 Black in even games, engine i searching each move with
    `limits[i]`. `engines` holds one started pair per game played at once: engines[2j] (engine 1) and
    engines[2j + 1] (engine 2). Opening k is used by games 2k and 2k+1 (cycling) when `paired`, else by
    game k alone (for data generation, where a deterministic engine would replay the same game with
    colours swapped). Records: one CSA file per game; one `position ...` line per game, in the order
    games end. With `sprt`, `games` is the most played: no game starts once the test has decided."""
    if games < 1:
        raise UserError(f"--games must be >= 1, got {games}")
    if len(limits) != 2:
        raise ValueError("a match needs a search limit for each engine")
    if not engines or len(engines) % 2:
        raise ValueError("a match needs engines in pairs")
    for i, limit in enumerate(limits):
        limit.validate(i)
    if not openings:
        raise UserError("no openings")
    result = MatchResult((engines[0].name, engines[1].name), paired=paired, sprt=sprt)
    free: queue.SimpleQueue[Sequence[UsiProcess]] = queue.SimpleQueue()
    for j in range(0, len(engines), 2):
        free.put(engines[j : j + 2])

    def play(i: int) -> Game:
        pair = free.get()
        try:
            return play_game(pair, game_opening(openings, i, paired), i % 2, limits, max_moves, number=i)
        finally:
            free.put(pair)

    interrupted = threading.Event()

    def on_interrupt(signum: int, frame: Any) -> None:
        """Ctrl-C ends the games in play by quitting their engines; the loop below then stops. Raising
        KeyboardInterrupt here instead could leave a future's lock held (mid concurrent.futures.wait)
        and the pool waiting on it forever."""
        interrupted.set()
        for engine in engines:
            engine.retire()

    def record(game: Game) -> None:
        if interrupted.is_set():
            return  # a game cut short by Ctrl-C has no result
        result.games.append(game)
        if csa_dir is not None:
            write_csa(Path(csa_dir) / f"game-{game.number + 1:04d}.csa", game, result.names)
        if sfen_file is not None:
            sfen_file.write(game.opening.usi(game.moves) + "\n")
            sfen_file.flush()
        result.stopped = result.decision
        e = result.elo
        llr = "" if sprt is None else f" LLR {result.llr:+.2f}"
        bar.set_postfix_str(f"+{e.wins} -{e.losses} ={e.draws} Elo {e.elo:+.0f}{llr}", refresh=False)
        bar.update(1)

    at_once = len(engines) // 2
    pool = ThreadPoolExecutor(at_once, thread_name_prefix="game")
    running: set[Future[Game]] = set()
    next_game = 0
    sfen_file = open(sfen_path, "a") if sfen_path else None  # noqa: SIM115 (closed in finally)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_interrupt) if main else None
    try:
        with tqdm(total=games, unit="game", disable=not progress, dynamic_ncols=True) as bar:
            while not interrupted.is_set():
                while next_game < games and len(running) < at_once and result.stopped is None:
                    running.add(pool.submit(play, next_game))
                    next_game += 1
                if not running:
                    break
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    record(future.result())
            if interrupted.is_set():
                wait(running)
                running = set()
                raise KeyboardInterrupt
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if running:  # an error or an interrupt: games still in play end as their engines are quit
            for engine in engines:
                engine.retire()
        pool.shutdown(wait=True, cancel_futures=True)
        if sfen_file is not None:
            sfen_file.close()
    return result


def run_match(
    specs: Sequence[EngineSpec],
    games: int,
    limits: Sequence[GoLimit],
    timeout: float = DEFAULT_MOVE_TIMEOUT,
    concurrency: int = 1,
    **kwargs: Any,
) -> MatchResult:
    """Start both engines (`concurrency` copies of each, one pair per game played at once), play the
    match, quit them."""
    if len(specs) != 2:
        raise ValueError("a match needs two engines")
    if concurrency < 1:
        raise UserError(f"--concurrency must be >= 1, got {concurrency}")
    with started(list(specs) * min(concurrency, games), timeout) as engines:
        return play_match(engines, games, limits, **kwargs)
