"""Gumbel AlphaZero self-play: many games advanced together, one batched network call per step.

Each process runs `parallel` games split into `groups`. A group's games walk their trees until every
one waits on the network (`engine.search.gumbel_tree`), the group's leaves go to the evaluator as one
batch in a background thread (torch and onnxruntime release the GIL), and meanwhile the other group's
games are resumed with their results and walk on. With one group, tree walking and inference take
turns. Finished games go to a background writer (`engine.selfplay.writer`); SIGINT/SIGTERM stop
after the current step, every finished game written, unfinished ones dropped.
`processes > 1` runs worker processes (own search, cache and output file) with one progress bar. Each
builds its own evaluator, or, with the inference server (`inference_server`: on, or auto with a GPU
backend), all feed one evaluator in one more process (`engine.backends.inference_server`: one GPU context and
engine build, rows of every worker in each forward call). A worker that dies (killed, crashed) is
reported and the others play on; its finished games stay in its file.

Games against an external USI engine (as dlshogi's self-play, and how a run bootstraps from an
existing engine): a `usi_fraction` of the games, the engine playing the colour `usi_colour` says. Our
moves come from the search as usual; the engine's are asked of a pool of `usi_engines` engine
processes in background threads (`UsiOpponents`), and the game waits while the other games go on.
The engine's moves are recorded without a policy target (hcpe3 candidateNum 0, eval from its `score`);
`bestmove resign` and an illegal move lose, `bestmove win` wins only if the position is a nyugyoku. A
crash or timeout drops that game (with a warning) and the engine is restarted.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import multiprocessing as mp
import os
import pickle
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as ready_connections
from pathlib import Path

import cshogi
import numpy as np
from tqdm import tqdm

from engine.backends.evaluator import Evaluator, Pending
from engine.backends.inference_server import ClientEvaluator, Endpoint, InferenceServer
from engine.core.rules import BLACK_WIN, DRAW, NYUGYOKU, WHITE_WIN, terminal, win_for
from engine.core.score import eval_to_value
from engine.errors import UserError
from engine.fileio import check_output_dir
from engine.match.arbiter import DEFAULT_MOVE_TIMEOUT, EngineFailure, EngineSpec, UsiProcess
from engine.records.formats import OPPONENT_SELFPLAY, OPPONENT_USI_BLACK, OPPONENT_USI_WHITE, RESULT_MASK
from engine.search.eval_cache import EvalCache
from engine.search.gumbel_search import LeafBatch, SearchParams, SearchResult
from engine.search.gumbel_tree import TreeSearch
from engine.selfplay.writer import FORMATS, GameRecord, GameWriter, output_path

USI_COLOURS = ("black", "white", "alternate")
INFERENCE_SERVER = ("auto", "on", "off")
OPPONENT_OF = {None: OPPONENT_SELFPLAY, cshogi.BLACK: OPPONENT_USI_BLACK, cshogi.WHITE: OPPONENT_USI_WHITE}


def parse_usi_options(items: Iterable[str]) -> dict[str, str]:
    """`NAME=VALUE` strings (as given to --usi-option) -> {name: value}; UserError if malformed."""
    options: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
            raise UserError(f"--usi-option {item!r}: expected NAME=VALUE (a name without spaces)")
        options[name.strip()] = value.strip()
    return options


def engine_colour(index: int, config: SelfPlayConfig) -> int | None:
    """The colour the USI engine plays in game `index`, or None for a self-play game. The external
    games are spread evenly over the indices (game i is one when floor((i+1)f) > floor(i f)), and
    'alternate' alternates over them, so every split of the indices between processes agrees."""
    if not config.external:
        return None
    f = config.usi_fraction
    before = int(index * f)
    if int((index + 1) * f) == before:
        return None
    if config.usi_colour == "alternate":
        return cshogi.BLACK if before % 2 == 0 else cshogi.WHITE
    return cshogi.BLACK if config.usi_colour == "black" else cshogi.WHITE


def usi_score_to_value(score: str | None) -> float:
    """The engine's `score cp N` / `score mate N` (its own side-to-move view) as a win probability;
    0.5 (eval 0) when it gave none."""
    kind, _, value = (score or "").partition(" ")
    if kind == "mate" and value:
        return 0.0 if value.startswith("-") else 1.0
    if kind == "cp":
        with suppress(ValueError):
            return float(eval_to_value(int(value)))
    return 0.5


@dataclass
class SelfPlayConfig:
    out_dir: str | Path = "selfplay"
    games: int = 64
    parallel: int = 64
    processes: int = 1
    groups: int = 2
    sims: int = 32
    considered: int = 16
    c_visit: float = 50.0
    c_scale: float = 1.0
    max_moves: int = 320
    random_plies: int = 0
    temperature: float = 1.0
    resign_threshold: float = 0.0  # resign when the root value drops below this; 0 never resigns
    resign_playout_fraction: float = 0.1
    seed: int = 0
    format: str = "hcpe3"
    cache_size: int = 300_000
    model: str | None = None
    activation: str | None = None  # relu|swish of a dlshogi checkpoint/npz that does not say
    backend: str = "auto"
    device: str | None = None
    batch: int = 256  # the evaluator's max batch; bigger leaf batches are split
    threads: int | None = None  # torch CPU threads per process (default: cores / processes)
    inference_server: str = "auto"  # one evaluator process for all workers: on, off, auto (with a GPU)
    progress: bool = True
    # games against an external USI engine
    usi_engine: str | None = None  # command line (shell words)
    usi_options: dict[str, str] = field(default_factory=dict)  # setoption name -> value
    usi_byoyomi: int | None = None  # its time per move in ms ...
    usi_nodes: int | None = None  # ... or its node budget per move
    usi_fraction: float = 1.0  # of the games (when an engine is given)
    usi_colour: str = "alternate"  # the colour the engine plays: black, white or alternate
    usi_engines: int = 1  # engine processes per self-play process (each answers one move at a time)
    usi_timeout: float = DEFAULT_MOVE_TIMEOUT  # seconds (on top of the byoyomi) before a game is dropped

    def validate(self) -> None:
        checks = [
            (self.games >= 1, "--games must be >= 1"),
            (self.parallel >= 1, "--parallel must be >= 1"),
            (self.processes >= 1, "--processes must be >= 1"),
            (self.groups in (1, 2), "--groups must be 1 or 2"),
            (self.sims >= 1, "--sims must be >= 1"),
            (self.considered >= 1, "--considered must be >= 1"),
            (self.c_visit >= 0 and self.c_scale >= 0, "--c-visit and --c-scale must be >= 0"),
            (self.max_moves >= 1, "--max-moves must be >= 1"),
            (self.random_plies >= 0, "--random-plies must be >= 0"),
            (self.temperature > 0, "--temperature must be > 0"),
            (0 <= self.resign_threshold < 1, "--resign-threshold must be in [0, 1)"),
            (0 <= self.resign_playout_fraction <= 1, "--resign-playout-fraction must be in [0, 1]"),
            (self.format in FORMATS, f"--format must be one of {', '.join(FORMATS)}"),
            (self.batch >= 1, "--batch must be >= 1"),
            (self.cache_size >= 0, "--cache must be >= 0"),
            (
                self.inference_server in INFERENCE_SERVER,
                f"--inference-server must be one of {', '.join(INFERENCE_SERVER)}",
            ),
            *self._usi_checks(),
        ]
        for ok, msg in checks:
            if not ok:
                raise UserError(msg)
        if self.usi_engine is not None:
            EngineSpec(self.usi_engine).argv  # noqa: B018 (a command that does not parse is a UserError)
        check_output_dir(self.out_dir, "--out")  # created with the first game's file, not before

    def _usi_checks(self) -> list[tuple[bool, str]]:
        if self.usi_engine is None:
            unused = self.usi_options or self.usi_byoyomi is not None or self.usi_nodes is not None
            return [(not unused, "--usi-option, --usi-byoyomi and --usi-nodes need --usi-engine")]
        return [
            (bool(self.usi_engine.strip()), "--usi-engine: empty command"),
            (
                (self.usi_byoyomi is None) != (self.usi_nodes is None),
                "--usi-engine needs its time per move: --usi-byoyomi MS or --usi-nodes N (one of them)",
            ),
            (self.usi_byoyomi is None or self.usi_byoyomi >= 0, "--usi-byoyomi must be >= 0"),
            (self.usi_nodes is None or self.usi_nodes >= 1, "--usi-nodes must be >= 1"),
            (0 <= self.usi_fraction <= 1, "--usi-fraction must be in [0, 1]"),
            (self.usi_colour in USI_COLOURS, f"--usi-colour must be one of {', '.join(USI_COLOURS)}"),
            (self.usi_engines >= 1, "--usi-engines must be >= 1"),
            (self.usi_timeout > 0, "--usi-timeout must be > 0"),
        ]

    @property
    def external(self) -> bool:
        """Whether any game is played against the USI engine."""
        return self.usi_engine is not None and self.usi_fraction > 0

    def search_params(self) -> SearchParams:
        return SearchParams(self.sims, self.considered, self.c_visit, self.c_scale, self.max_moves)


EvaluatorFactory = Callable[[int], Evaluator]  # max_batch -> evaluator (picklable for the server)
OnGame = Callable[[int, int | None, int], None]  # (positions, result byte or None if dropped, opponent)


@dataclass
class SelfPlayStats:
    games: int = 0
    positions: int = 0
    black_wins: int = 0
    white_wins: int = 0
    draws: int = 0
    resigned: int = 0
    playout_games: int = 0  # games kept playing past a resignable position (to measure false resigns)
    false_resigns: int = 0  # ... of which the side that would have resigned did not lose
    nn_positions: int = 0
    nn_batches: int = 0
    cache_hits: int = 0
    usi_games: int = 0  # games against the USI engine, and their outcome for us:
    usi_wins: int = 0
    usi_losses: int = 0
    usi_draws: int = 0
    dropped: int = 0  # games given up because the engine crashed or timed out
    workers_lost: int = 0  # worker processes that died (their finished games are counted and kept)
    server_calls: int = 0  # inference server: forward calls, and seconds its evaluator was busy
    server_busy: float = 0.0
    seconds: float = 0.0
    interrupted: bool = False
    files: list[str] = field(default_factory=list)

    def add_game(self, length: int, result: int | None, opponent: int = OPPONENT_SELFPLAY) -> None:
        """Count a finished game (`length` positions recorded); result None: a dropped game."""
        if result is None:
            self.dropped += 1
            return
        self.games += 1
        self.positions += length
        winner = result & RESULT_MASK
        if winner == DRAW:
            self.draws += 1
        elif winner == BLACK_WIN:
            self.black_wins += 1
        else:
            self.white_wins += 1
        if opponent != OPPONENT_SELFPLAY:
            self.usi_games += 1
            engine_wins = BLACK_WIN if opponent == OPPONENT_USI_BLACK else WHITE_WIN
            if winner == DRAW:
                self.usi_draws += 1
            elif winner == engine_wins:
                self.usi_losses += 1
            else:
                self.usi_wins += 1

    @property
    def usi_wld(self) -> str:
        return f"{self.usi_wins}/{self.usi_losses}/{self.usi_draws}"

    def merge(self, other: SelfPlayStats) -> None:
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "seconds":
                self.seconds = max(mine, theirs)
            elif isinstance(mine, bool):
                setattr(self, f.name, mine or theirs)
            else:
                setattr(self, f.name, mine + theirs)

    @property
    def pos_per_s(self) -> float:
        return self.positions / self.seconds if self.seconds > 0 else 0.0

    @property
    def mean_length(self) -> float:
        return self.positions / self.games if self.games else 0.0

    def summary(self) -> str:
        line = (
            f"{self.games} games, {self.positions} positions in {self.seconds:.1f}s "
            f"({self.pos_per_s:.1f} pos/s), mean length {self.mean_length:.1f}, "
            f"B/W/D {self.black_wins}/{self.white_wins}/{self.draws}"
        )
        if self.resigned or self.playout_games:
            line += f", resigned {self.resigned}, false resigns {self.false_resigns}/{self.playout_games}"
        if self.usi_games or self.dropped:
            line += f", vs USI engine {self.usi_games} games W/L/D {self.usi_wld}"
        if self.dropped:
            line += f", {self.dropped} dropped (engine crash or timeout)"
        if self.server_calls:
            line += (
                f", inference server {self.nn_positions / self.server_calls:.0f} rows/call, "
                f"busy {100 * self.server_busy / max(self.seconds, 1e-9):.0f}%"
            )
        if self.workers_lost:
            line += f", {self.workers_lost} worker process(es) died"
        if self.interrupted:
            line += " (interrupted: unfinished games dropped)"
        return line + "".join(f"\n  wrote {f}" for f in self.files)


def sample_move(policy: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """Opening randomisation: draw from the improved policy sharpened or flattened by 1/temperature."""
    logp = np.log(np.maximum(policy, 1e-300)) / temperature
    p = np.exp(logp - logp.max())
    return int(rng.choice(len(p), p=p / p.sum()))


def engine_reply_outcome(board: cshogi.Board, bestmove: str) -> tuple[int | None, int | None]:
    """(move, None) for a legal move the engine may play here, else (None, result byte): `resign`
    and an illegal move lose, `win` wins if the position is a nyugyoku and loses otherwise."""
    mover = board.turn
    if bestmove == "resign":
        return None, win_for(cshogi.opponent(mover)).result
    if bestmove == "win":
        ok = board.is_nyugyoku()
        return None, (win_for(mover, NYUGYOKU) if ok else win_for(cshogi.opponent(mover))).result
    move = board.move_from_usi(bestmove)
    if not move or not board.is_legal(move):
        return None, win_for(cshogi.opponent(mover)).result
    return move, None


def _hcp(board: cshogi.Board) -> np.ndarray:
    hcp = np.empty(32, np.uint8)
    board.to_hcp(hcp)
    return hcp


class _Game:
    """One game in progress: its board, record, RNG (seeded per game index) and running search, or in
    a game against the USI engine, the engine's pending reply."""

    def __init__(self, index: int, config: SelfPlayConfig) -> None:
        self.index = index
        self.rng = np.random.default_rng(np.random.SeedSequence([config.seed, index]))
        self.board = cshogi.Board()
        self.engine_colour = engine_colour(index, config)
        self.record = GameRecord(_hcp(self.board), opponent=OPPONENT_OF[self.engine_colour])
        self.usi_moves: list[str] = []  # the game so far, for the engine's `position` command
        self.search: Iterator[None] | None = None
        self.reply: Future[EngineReply] | None = None
        self.may_resign = config.resign_threshold > 0 and self.rng.random() >= config.resign_playout_fraction
        self.would_resign: int | None = None  # in a playout game: the colour that stood below threshold

    @property
    def engine_to_move(self) -> bool:
        return self.board.turn == self.engine_colour

    def _push(self, move: int) -> None:
        if self.engine_colour is not None:
            self.usi_moves.append(cshogi.move_to_usi(move))
        self.board.push(move)

    def play(self, result: SearchResult, config: SelfPlayConfig) -> int | None:
        """Record the searched position and play a move; returns a result byte if the mover resigns."""
        board, rec = self.board, self.record
        if len(rec) < config.random_plies:
            choice = sample_move(result.policy, config.temperature, self.rng)
        else:
            choice = result.choice
        move = result.moves[choice]
        candidates = (np.array(result.moves, dtype=np.int64) & 0xFFFF).astype(np.uint16)
        rec.add(_hcp(board), cshogi.move16(move), result.value, candidates, result.labels, result.policy)
        if config.resign_threshold > 0 and result.value < config.resign_threshold:
            if self.may_resign:
                return win_for(cshogi.opponent(board.turn)).result
            if self.would_resign is None:
                self.would_resign = board.turn
        self._push(move)
        return None

    def play_engine(self, reply: EngineReply) -> int | None:
        """Record and play the engine's move (no policy target); returns a result byte if it ended
        the game (resignation, declaration, illegal move: the latter is not recorded as a move)."""
        move, result = engine_reply_outcome(self.board, reply.bestmove or "resign")
        if move is not None:
            self.record.add(_hcp(self.board), cshogi.move16(move), usi_score_to_value(reply.score))
            self._push(move)
        return result


@dataclass
class EngineReply:
    bestmove: str | None  # None: the engine crashed or timed out (`error` says how)
    score: str | None = None  # the last `info ... score` it sent ("cp N" / "mate N")
    error: str = ""


@dataclass
class _Seat:
    engine: UsiProcess
    game: int | None = None  # the game whose moves it was last asked for


class UsiOpponents:
    """A pool of external USI engine processes. `ask` returns at once; a background thread (one per
    engine: `go` waits on the engine's pipe without holding the GIL) sends the position to a free
    engine, with `usinewgame` when it last served another game. A crash or timeout comes back as a
    failed reply and the engine is restarted on its next use; a failed start is a UserError."""

    def __init__(self, config: SelfPlayConfig) -> None:
        assert config.usi_engine is not None
        self.byoyomi, self.nodes = config.usi_byoyomi, config.usi_nodes
        spec = EngineSpec(config.usi_engine, dict(config.usi_options))
        self._seats = [_Seat(UsiProcess(spec, config.usi_timeout)) for _ in range(config.usi_engines)]
        self._idle: queue.SimpleQueue[_Seat] = queue.SimpleQueue()
        self._busy: set[int] = set()
        self._pool = ThreadPoolExecutor(len(self._seats), thread_name_prefix="usi-engine")
        try:
            for _ in self._pool.map(lambda seat: seat.engine.connect(), self._seats):
                pass
        except BaseException:
            self.close()
            raise
        for seat in self._seats:
            self._idle.put(seat)
        self.name = self._seats[0].engine.name

    def ask(self, game: int, moves: list[str]) -> Future[EngineReply]:
        """The engine's move after `moves` (USI, from the start position) in game number `game`."""
        return self._pool.submit(self._ask, game, list(moves))

    def _ask(self, game: int, moves: list[str]) -> EngineReply:
        seat = self._idle.get()
        self._busy.add(id(seat))
        engine = seat.engine
        try:
            if engine.proc is None:
                engine.connect()
            if seat.game != game:
                engine.usinewgame()
                seat.game = game
            engine.position(moves)
            bestmove, _ = engine.go(byoyomi=self.byoyomi, nodes=self.nodes)
            return EngineReply(bestmove, engine.last_score)
        except EngineFailure as e:
            engine.close()
            seat.game = None
            return EngineReply(None, error=str(e))
        finally:
            self._busy.discard(id(seat))
            self._idle.put(seat)

    def close(self) -> None:
        """Cancel queued requests, stop searches in progress, quit every engine."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        for seat in self._seats:
            if id(seat) in self._busy:
                with suppress(EngineFailure, AttributeError):
                    seat.engine._send("stop")
        for seat in self._seats:
            seat.engine.close()
        self._pool.shutdown(wait=True)


@contextmanager
def _opponents(config: SelfPlayConfig) -> Iterator[UsiOpponents | None]:
    if not config.external:
        yield None
        return
    opponents = UsiOpponents(config)
    try:
        yield opponents
    finally:
        opponents.close()


def _warn(message: str) -> None:
    tqdm.write(f"selfplay: warning: {message}", file=sys.stderr)


def group_sizes(config: SelfPlayConfig, games: int) -> list[int]:
    """The games in flight in each group of a process that plays `games` games."""
    parallel = min(config.parallel, games)
    groups = min(config.groups, parallel)
    return [parallel // groups + (g < parallel % groups) for g in range(groups)]


def leaf_rows(config: SelfPlayConfig, games: int) -> int:
    """The most rows one group's network call can have (each game's leaves of one round)."""
    return max(group_sizes(config, games), default=0) * (config.considered + 1)


@dataclass
class _Group:
    """Games that share one leaf batch (one network call per step) and its evaluator."""

    batch: LeafBatch
    search: TreeSearch
    slots: list[_Game | None]
    evaluator: Evaluator
    pending: Pending | None = None  # the batch's submitted network call


class _Runner:
    """Self-play in this process for the game indices in `indices`."""

    def __init__(
        self,
        config: SelfPlayConfig,
        evaluators: list[Evaluator],
        writer: GameWriter,
        indices: range,
        on_game: OnGame,
        stop: threading.Event,
        opponents: UsiOpponents | None = None,
    ) -> None:
        self.config = config
        self.writer = writer
        self.on_game = on_game
        self.stop = stop
        self.opponents = opponents
        self.stats = SelfPlayStats(files=[str(writer.path)])
        self._indices = iter(indices)
        self.cache = EvalCache(config.cache_size)
        params = config.search_params()
        self.groups = []
        for g, slots in enumerate(group_sizes(config, len(indices))):
            evaluator = evaluators[g % len(evaluators)]
            rows = slots * (config.considered + 1)
            batch = LeafBatch(rows, evaluator.input2, evaluator.input_buffers(rows))
            search = TreeSearch(params, self.cache, batch)
            self.groups.append(_Group(batch, search, [None] * slots, evaluator))

    def _finish(self, game: _Game, result: int) -> None:
        game.record.result = result
        self.writer.put(game.record)
        positions = len(game.record) if self.config.format == "hcpe3" else game.record.targets
        self.stats.add_game(positions, result, game.record.opponent)
        if game.would_resign is not None:
            self.stats.playout_games += 1
            loss = win_for(cshogi.opponent(game.would_resign)).result
            self.stats.false_resigns += (result & RESULT_MASK) != loss
        self.on_game(positions, result, game.record.opponent)

    def _drop(self, game: _Game, error: str) -> None:
        if not self.stop.is_set():  # on Ctrl-C the engines get the signal too: no news
            _warn(f"game {game.index} dropped after {len(game.record)} moves: {error}; restarting the engine")
        self.stats.add_game(0, None, game.record.opponent)
        self.on_game(0, None, game.record.opponent)

    def _engine_move(self, game: _Game) -> bool:
        """Apply the engine's finished reply; True if that ended (or dropped) the game."""
        assert game.reply is not None
        reply, game.reply = game.reply.result(), None
        if reply.bestmove is None:
            self._drop(game, reply.error)
            return True
        result = game.play_engine(reply)
        if result is not None:
            self._finish(game, result)
            return True
        return False

    def _advance(self, group: _Group, i: int) -> None:
        """Run slot i's game(s) until its search waits on the network or no game is left to start."""
        config = self.config
        while True:
            game = group.slots[i]
            if game is None:
                index = next(self._indices, None)
                if index is None:
                    return
                game = group.slots[i] = _Game(index, config)
            if game.reply is not None:
                if not game.reply.done():
                    return
                if self._engine_move(game):
                    group.slots[i] = None
                    continue
            if game.search is None:
                end = terminal(game.board, config.max_moves)
                if end is not None:
                    self._finish(game, end.result)
                    group.slots[i] = None
                    continue
                if game.engine_to_move:
                    assert self.opponents is not None
                    game.reply = self.opponents.ask(game.index, game.usi_moves)
                    return
                game.search = group.search.run(game.board, game.rng)
            try:
                next(game.search)
                return
            except StopIteration as done:
                game.search = None
                resigned = game.play(done.value, config)
            if resigned is not None:
                self.stats.resigned += 1
                self._finish(game, resigned)
                group.slots[i] = None

    @staticmethod
    def _submit(pool: ThreadPoolExecutor, evaluator: Evaluator, x1: np.ndarray, x2: np.ndarray) -> Pending:
        """Start the batch's network call: in the pool's thread for a blocking runtime that overlaps,
        so that the other group walks its trees meanwhile; otherwise through the evaluator's own
        `submit` (asynchronous, or at once for one with nothing to overlap)."""
        if evaluator.overlaps:
            return pool.submit(evaluator.evaluate_features, x1, x2).result
        return evaluator.submit(x1, x2)

    def run(self) -> SelfPlayStats:
        start = time.perf_counter()
        with ThreadPoolExecutor(1, thread_name_prefix="selfplay-eval") as pool:
            while True:
                busy = False
                for group in self.groups:
                    if group.pending is not None:
                        group.batch.policy, group.batch.value = group.pending()
                        group.pending = None
                    if self.stop.is_set():
                        continue
                    group.batch.clear()
                    for i in range(len(group.slots)):
                        self._advance(group, i)
                    n = group.batch.n
                    if n:
                        x1, x2 = group.batch.x1[:n], group.batch.x2[:n]
                        group.pending = self._submit(pool, group.evaluator, x1, x2)
                        self.stats.nn_positions += n
                        self.stats.nn_batches += 1
                        busy = True
                if not busy and all(g.pending is None for g in self.groups):
                    replies = [s.reply for g in self.groups for s in g.slots if s is not None and s.reply]
                    if not replies or self.stop.is_set():
                        break
                    wait(replies, timeout=0.5, return_when=FIRST_COMPLETED)  # only engines are busy
        self.stats.interrupted = self.stop.is_set() and any(
            s is not None for g in self.groups for s in g.slots
        )
        self.stats.cache_hits = self.cache.hits
        self.stats.seconds = time.perf_counter() - start
        return self.stats


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set `stop` (the run then ends cleanly) instead of killing the process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _progress_bar(config: SelfPlayConfig) -> tqdm:
    return tqdm(total=config.games, unit="game", disable=not config.progress, dynamic_ncols=True)


def _show(bar: tqdm, stats: SelfPlayStats, start: float) -> None:
    rate = stats.positions / max(time.perf_counter() - start, 1e-9)
    text = (
        f"pos {stats.positions} ({rate:.1f}/s) len {stats.mean_length:.0f} "
        f"B/W/D {stats.black_wins}/{stats.white_wins}/{stats.draws}"
    )
    if stats.usi_games or stats.dropped:
        text += f" vs USI W/L/D {stats.usi_wld}" + (f" dropped {stats.dropped}" if stats.dropped else "")
    bar.set_postfix_str(text, refresh=False)
    bar.update(1)


def _threads(config: SelfPlayConfig) -> int:
    return config.threads or max(1, (os.cpu_count() or 1) // config.processes)


def _make_evaluator(
    config: SelfPlayConfig,
    log: Callable[[str], None] | None = None,
    max_batch: int | None = None,
    threads: int | None = None,
) -> Evaluator:
    """The configured evaluator, its CPU threads limited so that worker processes do not oversubscribe."""
    import torch

    from engine.backends.choose import create_evaluator

    threads = threads or _threads(config)
    torch.set_num_threads(threads)
    kwargs = {"log": log} if log is not None else {}
    return create_evaluator(
        config.model,
        config.backend,
        max_batch or config.batch,
        config.device,
        threads=threads,
        activation=config.activation,
        **kwargs,
    )


def _server_evaluator(config: SelfPlayConfig, max_batch: int) -> Evaluator:
    """The inference server's evaluator: the configured model, with every CPU thread (it is the only one)."""
    return _make_evaluator(config, max_batch=max_batch, threads=config.threads or os.cpu_count() or 1)


def _gpu_backend(config: SelfPlayConfig) -> bool:
    """Whether the configured evaluator would run on a GPU, decided without building it."""
    from engine.backends.choose import choose_backend, default_model_path, model_kind, probe_platform

    path = Path(config.model) if config.model else default_model_path()
    try:
        choice = choose_backend(config.backend, model_kind(path), probe_platform(config.device))
    except UserError:
        return False  # building the evaluator reports it
    return choice.device == "cuda"


def _server_factory(config: SelfPlayConfig, shared: EvaluatorFactory | None) -> EvaluatorFactory | None:
    """The factory of the inference server's evaluator, or None to run without a server."""
    if shared is not None:
        return shared
    if config.inference_server == "on" or (
        config.inference_server == "auto" and config.processes > 1 and _gpu_backend(config)
    ):
        return functools.partial(_server_evaluator, config)
    return None


def _run_here(
    config: SelfPlayConfig,
    evaluators: list[Evaluator] | None,
    indices: range,
    on_game: OnGame,
    stop: threading.Event,
    tag: str = "",
    log: Callable[[str], None] | None = None,
) -> SelfPlayStats:
    """Play the games `indices` here; the USI engines start before the evaluator (or a TensorRT build)
    and the output file, so an engine that cannot start fails fast and leaves no file behind."""
    with _opponents(config) as opponents:
        if evaluators is None:
            evaluators = [_make_evaluator(config, log)]
        writer = GameWriter(output_path(config.out_dir, config.format, tag), config.format)
        try:
            stats = _Runner(config, evaluators, writer, indices, on_game, stop, opponents).run()
        finally:
            writer.close()
    return stats


def _worker(
    config: SelfPlayConfig,
    index: int,
    indices: range,
    events: Connection,
    stop: mp.Event,
    endpoints: list[Endpoint] | None,
) -> None:
    """A worker process: its own file, and its own evaluator or clients of the inference server (one
    per group, so that both groups' calls can be in flight);
    progress and final stats go to the parent through its own pipe `events` (a worker killed while
    writing can garble only its own pipe)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    local_stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: local_stop.set())
    threading.Thread(target=lambda: (stop.wait(), local_stop.set()), daemon=True).start()
    try:
        on_game: OnGame = lambda *game: events.send(("game", *game))  # noqa: E731
        with ExitStack() as stack:
            clients = [stack.enter_context(ClientEvaluator(e)) for e in endpoints] if endpoints else None
            tag = f"-w{index}"
            stats = _run_here(config, clients, indices, on_game, local_stop, tag, log=lambda _: None)
        events.send(("done", dataclasses.asdict(stats)))
    except UserError as e:
        events.send(("user_error", str(e)))
    except BaseException as e:
        events.send(("error", f"{type(e).__name__}: {e}"))


def _split(games: int, parts: int) -> list[range]:
    bounds = [games * i // parts for i in range(parts + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(parts)]


class _Workers:
    """The parent's view of the worker processes: live progress, final stats, failures and deaths
    (a worker whose pipe ends before its report died: killed or crashed)."""

    def __init__(
        self, config: SelfPlayConfig, procs: list, events: list[Connection], stop_all: mp.Event
    ) -> None:
        self.config, self.procs, self.events, self.stop_all = config, procs, events, stop_all
        self.live = [SelfPlayStats() for _ in procs]  # from game events: what a dead worker finished
        self.done: dict[int, SelfPlayStats] = {}
        self.dead: set[int] = set()
        self.errors: list[str] = []
        self.user_errors: list[str] = []
        self.reported: set[int] = set()

    def _handle(self, index: int, event: tuple) -> None:
        kind, *rest = event
        if kind == "game":
            self.live[index].add_game(*rest)
            return
        self.reported.add(index)
        if kind == "done":
            self.done[index] = SelfPlayStats(**rest[0])
        else:
            (self.user_errors if kind == "user_error" else self.errors).append(rest[0])
            self.stop_all.set()  # a worker that failed (rather than died) ends the run

    def _ended(self, index: int) -> None:
        """Its pipe is closed: after its report, or it died."""
        self.events[index].close()
        if index not in self.reported:
            self.procs[index].join(5)
            self.dead.add(index)
            code = self.procs[index].exitcode
            _warn(f"worker {index} died (exit code {code}); its finished games are kept, the others play on")

    def collect(self, stop: threading.Event) -> SelfPlayStats:
        start = time.perf_counter()
        shown = SelfPlayStats()
        open_pipes = dict(enumerate(self.events))
        with _progress_bar(self.config) as bar:
            while open_pipes:
                if stop.is_set():
                    self.stop_all.set()
                ready = ready_connections(list(open_pipes.values()), 0.2)
                for i, conn in list(open_pipes.items()):
                    if conn not in ready:
                        continue
                    try:
                        event = conn.recv()
                    except (EOFError, OSError, pickle.UnpicklingError):
                        del open_pipes[i]
                        self._ended(i)
                        continue
                    self._handle(i, event)
                    if event[0] == "game":
                        shown.add_game(*event[1:])
                        _show(bar, shown, start)
        for p in self.procs:
            p.join()
        total = SelfPlayStats()
        for i in range(len(self.procs)):
            if i in self.done:
                total.merge(self.done[i])
            elif i in self.dead:
                total.merge(self.live[i])
                total.workers_lost += 1
        return total  # seconds: the longest worker's games, as in one process (not start-up or build)


def _run_processes(
    config: SelfPlayConfig, stop: threading.Event, shared: EvaluatorFactory | None = None
) -> SelfPlayStats:
    ctx = mp.get_context("spawn")
    stop_all = ctx.Event()
    parts = [r for r in _split(config.games, config.processes) if len(r)]
    factory = _server_factory(config, shared)
    server = None
    endpoints: list[list[Endpoint] | None] = [None] * len(parts)
    if factory is not None:
        groups = [len(group_sizes(config, len(r))) for r in parts]  # a client per group of each worker
        rows = max(leaf_rows(config, len(r)) for r in parts)
        batch = rows * len(parts)  # room for one full batch of every worker in one call
        server = InferenceServer(functools.partial(factory, batch), sum(groups), rows, ctx=ctx)
        flat = server.start()
        ends = list(itertools.accumulate(groups))
        endpoints = [flat[end - g : end] for g, end in zip(groups, ends, strict=True)]
    if stop.is_set() and server is not None:  # interrupted while the server built its evaluator
        server.close()
        return SelfPlayStats(interrupted=True)
    try:
        pipes = [ctx.Pipe(duplex=False) for _ in parts]  # (parent's receiving end, worker's sending end)
        procs = [
            ctx.Process(
                target=_worker,
                args=(config, i, r, pipes[i][1], stop_all, endpoints[i]),
                name=f"selfplay-w{i}",
                daemon=True,
            )
            for i, r in enumerate(parts)
        ]
        for p in procs:
            p.start()
        for _, sender in pipes:
            sender.close()  # the worker's copy is the only one: its death ends the pipe
        if server is not None:
            server.handed_over()
        workers = _Workers(config, procs, [receiver for receiver, _ in pipes], stop_all)
        total = workers.collect(stop)
    finally:
        served = server.close() if server is not None else None
    if workers.user_errors:
        raise UserError(workers.user_errors[0])
    if workers.errors:
        why = f" (inference server: {server.error})" if server is not None and server.error else ""
        raise RuntimeError(f"self-play worker failed: {workers.errors[0]}{why}")
    if served is not None:
        total.server_calls, total.server_busy = served.calls, served.busy_seconds
    # stopped before every game was played, even before any started (during an engine build, say)
    total.interrupted = total.interrupted or (stop.is_set() and total.games + total.dropped < config.games)
    return total


def run_selfplay(
    config: SelfPlayConfig,
    evaluator: Evaluator | None = None,
    shared_evaluator: EvaluatorFactory | None = None,
) -> SelfPlayStats:
    """Play `config.games` games and write them to one new file per process under `config.out_dir`.

    shared_evaluator: a picklable max_batch -> Evaluator run by the inference server for every worker
    (benchmarks and tests: a latency model, a test network); by default the configured model."""
    config.validate()
    stop = threading.Event()
    with _stop_on_signals(stop):
        if config.processes > 1 or shared_evaluator is not None or config.inference_server == "on":
            if evaluator is not None:
                raise ValueError("worker processes build their evaluator or share the server's; pass none")
            return _run_processes(config, stop, shared_evaluator)
        start = time.perf_counter()
        stats = SelfPlayStats()
        with _progress_bar(config) as bar:
            return _run_here(
                config,
                None if evaluator is None else [evaluator],
                range(config.games),
                lambda *game: (stats.add_game(*game), _show(bar, stats, start)),
                stop,
            )
