"""Games between two USI engines: alternating colours, fixed node budget or byoyomi, exact arbitration.

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
import random
import shlex
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import cshogi
import cshogi.usi
from cshogi import CSA
from tqdm import tqdm

from engine.core.rules import DEFAULT_MAX_MOVES, MAX_MOVES, SENNICHITE, game_terminal, terminal
from engine.errors import UserError
from engine.fileio import atomic_write
from engine.match.elo import EloEstimate, elo_estimate

STARTPOS = "startpos"
DEFAULT_MOVE_TIMEOUT = 60.0  # seconds on top of the byoyomi before an engine loses on time
DEFAULT_RANDOM_PLIES = 4  # random opening plies, so deterministic engines still play distinct games
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


class EngineFailure(Exception):
    """The engine process died, closed its output or (`timed_out`) did not answer in time."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


@dataclass
class EngineSpec:
    """How to start one engine: a command line (shell-quoted words) and USI options to set."""

    command: str
    options: dict[str, str] = field(default_factory=dict)
    name: str | None = None

    @property
    def argv(self) -> list[str]:
        try:
            argv = shlex.split(self.command)
        except ValueError as e:
            raise UserError(f"engine command {self.command!r}: {e}") from None
        if not argv:
            raise UserError("empty engine command")
        return argv

    @property
    def label(self) -> str:
        return self.name or Path(self.argv[0]).name


class UsiProcess(cshogi.usi.Engine):
    """cshogi's Engine, made safe for unattended matches: the command may have arguments, stderr
    goes to a file (an unread pipe would stall a chatty engine), and every read has a deadline and
    notices end of output, so a dead or hung engine raises EngineFailure instead of blocking."""

    def __init__(self, spec: EngineSpec, timeout: float = DEFAULT_MOVE_TIMEOUT) -> None:
        self.spec = spec
        self.timeout = timeout
        self.last_score: str | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: IO[bytes] | None = None
        super().__init__(spec.command, connect=False)

    # ----- process -----

    def connect(self, listener: Any = None) -> None:
        argv = self.spec.argv
        exe = Path(argv[0])
        if exe.parent != Path("") and exe.exists():  # run in its folder, as cshogi does, so make it absolute
            exe = Path(os.path.abspath(exe))  # not resolve(): a venv's python is a symlink out of the venv
            argv[0] = str(exe)
        self._stderr = tempfile.TemporaryFile()
        self._lines = queue.Queue()
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                cwd=str(exe.parent) if exe.parent != Path("") else None,
            )
        except OSError as e:
            raise UserError(f"engine {self.spec.command!r}: cannot start: {e.strerror or e}") from None
        # The queue is handed over, not looked up: after a restart the old process's reader, still
        # draining to its end, must not put its end-of-output into the new process's queue.
        threading.Thread(target=self._pump, args=(self.proc.stdout, self._lines), daemon=True).start()
        try:
            self._send("usi")
            self.name = self.spec.label
            while (line := self._read(self.timeout)) != "usiok":
                if line.startswith("id name "):
                    self.name = self.spec.name or line[8:]
            for key, value in self.spec.options.items():
                self.setoption(key, value)
            self.isready()
        except EngineFailure as e:
            self.close()
            raise UserError(f"engine {self.spec.command!r} failed to start: {e}") from None

    @staticmethod
    def _pump(stdout: IO[bytes], lines: queue.Queue[str | None]) -> None:
        for raw in stdout:
            lines.put(raw.decode("utf-8", "replace").strip())
        lines.put(None)

    def _send(self, cmd: str) -> None:
        try:
            self.proc.stdin.write(cmd.encode("utf-8") + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise EngineFailure(f"{self.name}: engine exited{self._stderr_tail()}") from None

    def _read(self, timeout: float) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise EngineFailure(f"{self.name}: no answer within {timeout:g}s", timed_out=True) from None
        if line is None:
            self._lines.put(None)  # stay at end of output for later reads
            raise EngineFailure(f"{self.name}: engine exited{self._stderr_tail()}")
        return line

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - 300))
            tail = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
            if tail:
                return f" (stderr: {tail[-1]})"
        return ""

    def restart(self) -> None:
        self.close()
        self.connect()

    def close(self) -> None:
        """quit, then terminate/kill if the engine does not exit promptly. Safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is not None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.write(b"quit\n")
                proc.stdin.flush()
                proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def quit(self, listener: Any = None) -> None:
        self.close()

    # ----- protocol (cshogi's writers go through stdin directly; these read with deadlines) -----

    def setoption(self, name: str, value: str | int, listener: Any = None) -> None:
        self._send(f"setoption name {name} value {value}")

    def usinewgame(self, listener: Any = None) -> None:
        self._send("usinewgame")

    def position(self, moves: list[str] | None = None, sfen: str = STARTPOS, listener: Any = None) -> None:
        self._send(f"position {sfen}" + (" moves " + " ".join(moves) if moves else ""))

    def gameover(self, result: str | None = None, listener: Any = None) -> None:
        self._send("gameover" + (f" {result}" if result else ""))

    def isready(self, listener: Any = None) -> None:
        self._send("isready")
        while self._read(max(self.timeout, 600.0)) != "readyok":  # model loading may take long
            pass

    def go(
        self,
        ponder: bool = False,
        btime: int | None = None,
        wtime: int | None = None,
        byoyomi: int | None = None,
        binc: int | None = None,
        winc: int | None = None,
        nodes: int | None = None,
        listener: Any = None,
        depth: int | None = None,
    ) -> tuple[str, str | None]:
        cmd = "go"
        if byoyomi is not None:
            cmd += f" btime 0 wtime 0 byoyomi {byoyomi}"
        if nodes is not None:
            cmd += f" nodes {nodes}"
        if depth is not None:
            cmd += f" depth {depth}"
        self._send(cmd)
        deadline = time.monotonic() + self.timeout + (byoyomi or 0) / 1000
        self.last_score = None
        while True:
            line = self._read(max(0.0, deadline - time.monotonic()))
            if line.startswith("info") and " score " in line:
                words = line.split()
                k = words.index("score")
                self.last_score = " ".join(words[k + 1 : k + 3])
            elif line.startswith("bestmove"):
                words = line.split()
                if len(words) < 2:
                    return "resign", None
                return words[1], words[3] if len(words) >= 4 and words[2] == "ponder" else None


# ----- openings -----


@dataclass(frozen=True)
class Opening:
    """A start position (`startpos` or `sfen <4 fields>`) and USI moves played from it."""

    position: str = STARTPOS
    moves: tuple[str, ...] = ()

    def start_board(self) -> cshogi.Board:
        """The position before the opening's moves."""
        return cshogi.Board() if self.position == STARTPOS else cshogi.Board(self.position[5:])

    def board(self) -> cshogi.Board:
        board = self.start_board()
        for m in self.moves:
            board.push_usi(m)
        return board

    def usi(self, extra: Sequence[str] = ()) -> str:
        moves = [*self.moves, *extra]
        return f"position {self.position}" + (" moves " + " ".join(moves) if moves else "")


def parse_opening(line: str) -> Opening:
    """A line as `position startpos moves ...`, `startpos moves ...`, `sfen ... moves ...` or a bare
    SFEN; ValueError if malformed or a move is illegal."""
    words = line.split()
    if words[:1] == ["position"]:
        words = words[1:]
    if "moves" in words:
        k = words.index("moves")
        head, moves = words[:k], words[k + 1 :]
    else:
        head, moves = words, []
    if head == [STARTPOS]:
        position = STARTPOS
    else:
        fields = head[1:] if head[:1] == ["sfen"] else head
        if len(fields) == 3:
            fields = [*fields, "1"]
        if len(fields) != 4 or fields[0].count("/") != 8 or fields[1] not in ("b", "w"):
            raise ValueError(f"not a position: {line.strip()!r}")
        position = "sfen " + " ".join(fields)
        if not cshogi.Board(position[5:]).is_ok():
            raise ValueError(f"not a legal position: {line.strip()!r}")
    board = cshogi.Board() if position == STARTPOS else cshogi.Board(position[5:])
    for i, m in enumerate(moves):
        move = board.move_from_usi(m)
        if not move or not board.is_legal(move):
            raise ValueError(f"move {i + 1} {m!r} is illegal in {line.strip()!r}")
        board.push(move)
    if terminal(board, None) is not None:
        raise ValueError(f"the game is already over: {line.strip()!r}")
    return Opening(position, tuple(moves))


def read_openings(path: str | os.PathLike) -> list[Opening]:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise UserError(f"--openings {path}: {e.strerror or e}") from None
    openings = []
    for n, line in enumerate(lines, 1):
        if line.strip() and not line.lstrip().startswith("#"):
            try:
                openings.append(parse_opening(line))
            except ValueError as e:
                raise UserError(f"--openings {path}:{n}: {e}") from None
    if not openings:
        raise UserError(f"--openings {path}: no positions in the file")
    return openings


def random_openings(count: int, plies: int, seed: int = 0) -> list[Opening]:
    """`count` distinct openings of `plies` uniformly random legal moves from the start (none over)."""
    if plies <= 0:
        return [Opening()]
    rng = random.Random(seed)
    seen: set[tuple[str, ...]] = set()
    openings: list[Opening] = []
    for _ in range(count * 20):
        board, moves = cshogi.Board(), []
        for _ in range(plies):
            move = rng.choice(list(board.legal_moves))
            board.push(move)
            moves.append(cshogi.move_to_usi(move))
            if terminal(board, None) is not None:
                break
        key = tuple(moves)
        if len(moves) == plies and key not in seen:
            seen.add(key)
            openings.append(Opening(STARTPOS, key))
            if len(openings) == count:
                break
    return openings


def game_opening(openings: Sequence[Opening], game: int, paired: bool) -> Opening:
    """The opening of game `game` (0-based): paired, games 2k and 2k+1 share opening k (colours
    swapped); unpaired, game k has opening k. Openings are reused cyclically when there are too few."""
    return openings[(game // 2 if paired else game) % len(openings)]


def repeated_games(games: int, openings: Sequence[Opening], paired: bool = True) -> int:
    """How many of `games` start like an earlier game (same opening, same colours): deterministic
    engines replay those move for move, so they add no information."""
    starts = {(game_opening(openings, i, paired), i % 2) for i in range(games)}
    return games - len(starts)


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
    nodes: int | None,
    byoyomi: int | None,
    max_moves: int,
) -> Game:
    """One game; engine `black` moves first. Engine failures end the game as a loss for that side."""
    game = Game(opening, black)
    board = opening.start_board()
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
        engine = engines[black if turn == cshogi.BLACK else 1 - black]
        try:
            engine.position([*opening.moves, *game.moves], opening.position)
            bestmove, _ = engine.go(nodes=nodes, byoyomi=byoyomi)
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


@contextlib.contextmanager
def started(specs: Sequence[EngineSpec], timeout: float = DEFAULT_MOVE_TIMEOUT) -> Iterator[list[UsiProcess]]:
    """Start the engines (usi, options, isready); always quit them on the way out."""
    engines: list[UsiProcess] = []
    try:
        for spec in specs:
            engine = UsiProcess(spec, timeout)
            engines.append(engine)
            engine.connect()
        yield engines
    finally:
        for engine in engines:
            engine.close()


def play_match(
    engines: Sequence[UsiProcess],
    games: int,
    nodes: int | None = None,
    byoyomi: int | None = None,
    max_moves: int = DEFAULT_MAX_MOVES,
    openings: Sequence[Opening] = (Opening(),),
    csa_dir: str | os.PathLike | None = None,
    sfen_path: str | os.PathLike | None = None,
    progress: bool = True,
    paired: bool = True,
) -> MatchResult:
    """`games` games between two started engines, engine 0 Black in even games. Opening k is used by
    games 2k and 2k+1 (cycling) when `paired`, else by game k alone (for data generation, where a
    deterministic engine would replay the same game with colours swapped). Records: one CSA file per
    game; one `position ...` line per game."""
    if games < 1:
        raise UserError(f"--games must be >= 1, got {games}")
    if nodes is None and byoyomi is None:
        raise UserError("give a node budget (--nodes) or a time per move (--byoyomi)")
    if not openings:
        raise UserError("no openings")
    result = MatchResult((engines[0].name, engines[1].name))
    sfen_file = open(sfen_path, "a") if sfen_path else None  # noqa: SIM115 (closed in finally)
    try:
        with tqdm(total=games, unit="game", disable=not progress, dynamic_ncols=True) as bar:
            for i in range(games):
                opening = game_opening(openings, i, paired)
                game = play_game(engines, opening, i % 2, nodes, byoyomi, max_moves)
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
    timeout: float = DEFAULT_MOVE_TIMEOUT,
    **kwargs: Any,
) -> MatchResult:
    """Start both engines, play the match, quit them."""
    if len(specs) != 2:
        raise ValueError("a match needs two engines")
    with started(specs, timeout) as engines:
        return play_match(engines, games, **kwargs)
