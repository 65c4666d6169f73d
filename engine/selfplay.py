"""Gumbel AlphaZero self-play: many games advanced together, one batched network call per step.

Each process runs `parallel` games split into `groups`. A group's games walk their trees until every
one waits on the network (`engine.gumbel_search`), the group's leaves go to the evaluator as one
batch in a background thread (torch and onnxruntime release the GIL), and meanwhile the other group's
games are resumed with their results and walk on. With one group, tree walking and inference take
turns. Finished games go to a background writer (`engine.selfplay_writer`); SIGINT/SIGTERM stop
after the current step, every finished game written, unfinished ones dropped.
`processes > 1` runs independent workers (own evaluator, cache and output file) with one progress bar.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import cshogi
import numpy as np
from tqdm import tqdm

from engine.errors import UserError
from engine.evaluator import Evaluator
from engine.gumbel_search import EvalCache, GumbelSearch, LeafBatch, SearchParams, SearchResult
from engine.records import RESULT_MASK
from engine.rules import BLACK_WIN, DRAW, terminal, win_for
from engine.selfplay_writer import FORMATS, GameRecord, GameWriter, output_path


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
    backend: str = "auto"
    device: str | None = None
    batch: int = 256  # the evaluator's max batch; bigger leaf batches are split
    threads: int | None = None  # torch CPU threads per process (default: cores / processes)
    progress: bool = True

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
        ]
        for ok, msg in checks:
            if not ok:
                raise UserError(msg)
        out = Path(self.out_dir)
        if out.exists() and not out.is_dir():
            raise UserError(f"--out {out}: not a directory")

    def search_params(self) -> SearchParams:
        return SearchParams(self.sims, self.considered, self.c_visit, self.c_scale, self.max_moves)


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
    seconds: float = 0.0
    interrupted: bool = False
    files: list[str] = field(default_factory=list)

    def add_game(self, length: int, result: int) -> None:
        self.games += 1
        self.positions += length
        winner = result & RESULT_MASK
        if winner == DRAW:
            self.draws += 1
        elif winner == BLACK_WIN:
            self.black_wins += 1
        else:
            self.white_wins += 1

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
        if self.interrupted:
            line += " (interrupted: unfinished games dropped)"
        return line + "".join(f"\n  wrote {f}" for f in self.files)


def sample_move(policy: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """Opening randomisation: draw from the improved policy sharpened or flattened by 1/temperature."""
    logp = np.log(np.maximum(policy, 1e-300)) / temperature
    p = np.exp(logp - logp.max())
    return int(rng.choice(len(p), p=p / p.sum()))


class _Game:
    """One game in progress: its board, record, RNG (seeded per game index) and running search."""

    def __init__(self, index: int, config: SelfPlayConfig) -> None:
        self.rng = np.random.default_rng(np.random.SeedSequence([config.seed, index]))
        self.board = cshogi.Board()
        start = np.empty(32, np.uint8)
        self.board.to_hcp(start)
        self.record = GameRecord(start)
        self.search: Iterator[None] | None = None
        self.may_resign = config.resign_threshold > 0 and self.rng.random() >= config.resign_playout_fraction
        self.would_resign: int | None = None  # in a playout game: the colour that stood below threshold

    def play(self, result: SearchResult, config: SelfPlayConfig) -> int | None:
        """Record the searched position and play a move; returns a result byte if the mover resigns."""
        board, rec = self.board, self.record
        hcp = np.empty(32, np.uint8)
        board.to_hcp(hcp)
        if len(rec) < config.random_plies:
            choice = sample_move(result.policy, config.temperature, self.rng)
        else:
            choice = result.choice
        move = result.moves[choice]
        rec.hcps.append(hcp)
        rec.move16s.append(cshogi.move16(move))
        rec.values.append(result.value)
        rec.candidates.append((np.array(result.moves, dtype=np.int64) & 0xFFFF).astype(np.uint16))
        rec.labels.append(result.labels)
        rec.policies.append(result.policy)
        if config.resign_threshold > 0 and result.value < config.resign_threshold:
            if self.may_resign:
                return win_for(cshogi.opponent(board.turn)).result
            if self.would_resign is None:
                self.would_resign = board.turn
        board.push(move)
        return None


@dataclass
class _Group:
    """Games that share one leaf batch (one network call per step)."""

    batch: LeafBatch
    search: GumbelSearch
    slots: list[_Game | None]
    future: Future | None = None


class _Runner:
    """Self-play in this process for the game indices in `indices`."""

    def __init__(
        self,
        config: SelfPlayConfig,
        evaluator: Evaluator,
        writer: GameWriter,
        indices: range,
        on_game: Callable[[int, int], None],
        stop: threading.Event,
    ) -> None:
        self.config = config
        self.evaluator = evaluator
        self.writer = writer
        self.on_game = on_game
        self.stop = stop
        self.stats = SelfPlayStats(files=[str(writer.path)])
        self._indices = iter(indices)
        self.cache = EvalCache(config.cache_size)
        params = config.search_params()
        parallel = min(config.parallel, len(indices))
        groups = min(config.groups, parallel)
        self.groups = []
        for g in range(groups):
            slots = parallel // groups + (g < parallel % groups)
            batch = LeafBatch(slots * (config.considered + 1), evaluator.input2)
            self.groups.append(_Group(batch, GumbelSearch(params, self.cache, batch), [None] * slots))

    def _finish(self, game: _Game, result: int) -> None:
        game.record.result = result
        self.writer.put(game.record)
        self.stats.add_game(len(game.record), result)
        if game.would_resign is not None:
            self.stats.playout_games += 1
            loss = win_for(cshogi.opponent(game.would_resign)).result
            self.stats.false_resigns += (result & RESULT_MASK) != loss
        self.on_game(len(game.record), result)

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
            if game.search is None:
                end = terminal(game.board, config.max_moves)
                if end is not None:
                    self._finish(game, end.result)
                    group.slots[i] = None
                    continue
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

    def run(self) -> SelfPlayStats:
        start = time.perf_counter()
        with ThreadPoolExecutor(1, thread_name_prefix="selfplay-eval") as pool:
            while True:
                busy = False
                for group in self.groups:
                    if group.future is not None:
                        group.batch.policy, group.batch.value = group.future.result()
                        group.future = None
                    if self.stop.is_set():
                        continue
                    group.batch.clear()
                    for i in range(len(group.slots)):
                        self._advance(group, i)
                    n = group.batch.n
                    if n:
                        x1, x2 = group.batch.x1[:n], group.batch.x2[:n]
                        group.future = pool.submit(self.evaluator.evaluate_features, x1, x2)
                        self.stats.nn_positions += n
                        self.stats.nn_batches += 1
                        busy = True
                if not busy and all(g.future is None for g in self.groups):
                    break
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
    bar.set_postfix_str(
        f"pos {stats.positions} ({rate:.1f}/s) len {stats.mean_length:.0f} "
        f"B/W/D {stats.black_wins}/{stats.white_wins}/{stats.draws}",
        refresh=False,
    )
    bar.update(1)


def _threads(config: SelfPlayConfig) -> int:
    return config.threads or max(1, (os.cpu_count() or 1) // config.processes)


def _make_evaluator(config: SelfPlayConfig, log: Callable[[str], None] | None = None) -> Evaluator:
    """The configured evaluator, its CPU threads limited so that worker processes do not oversubscribe."""
    import torch

    from engine.backends import create_evaluator

    torch.set_num_threads(_threads(config))
    kwargs = {"log": log} if log is not None else {}
    return create_evaluator(
        config.model, config.backend, config.batch, config.device, threads=_threads(config), **kwargs
    )


def _run_here(
    config: SelfPlayConfig,
    evaluator: Evaluator,
    indices: range,
    on_game: Callable[[int, int], None],
    stop: threading.Event,
    tag: str = "",
) -> SelfPlayStats:
    writer = GameWriter(output_path(config.out_dir, config.format, tag), config.format)
    try:
        stats = _Runner(config, evaluator, writer, indices, on_game, stop).run()
    finally:
        writer.close()
    return stats


def _worker(config: SelfPlayConfig, indices: range, tag: str, events: mp.Queue, stop: mp.Event) -> None:
    """A worker process: its own evaluator and file; progress and final stats go through `events`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    local_stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: local_stop.set())
    threading.Thread(target=lambda: (stop.wait(), local_stop.set()), daemon=True).start()
    try:
        evaluator = _make_evaluator(config, log=lambda msg: None)
        stats = _run_here(
            config, evaluator, indices, lambda n, r: events.put(("game", n, r)), local_stop, tag
        )
        events.put(("done", dataclasses.asdict(stats)))
    except BaseException as e:
        events.put(("error", f"{type(e).__name__}: {e}"))


def _split(games: int, parts: int) -> list[range]:
    bounds = [games * i // parts for i in range(parts + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(parts)]


def _run_processes(config: SelfPlayConfig, stop: threading.Event) -> SelfPlayStats:
    ctx = mp.get_context("spawn")
    events = ctx.Queue()
    stop_all = ctx.Event()
    parts = [r for r in _split(config.games, config.processes) if len(r)]
    procs = [
        ctx.Process(target=_worker, args=(config, r, f"-w{i}", events, stop_all), daemon=True)
        for i, r in enumerate(parts)
    ]
    for p in procs:
        p.start()
    total, live, errors = SelfPlayStats(), SelfPlayStats(), []
    start = time.perf_counter()
    remaining = len(procs)
    with _progress_bar(config) as bar:
        while remaining:
            if stop.is_set():
                stop_all.set()
            try:
                event = events.get(timeout=0.2)
            except queue.Empty:
                if not any(p.is_alive() for p in procs):
                    errors.append("a worker process died")
                    break
                continue
            if event[0] == "game":
                live.add_game(event[1], event[2])
                _show(bar, live, start)
            elif event[0] == "done":
                total.merge(SelfPlayStats(**event[1]))
                remaining -= 1
            else:
                errors.append(event[1])
                remaining -= 1
    for p in procs:
        p.join()
    if errors:
        raise RuntimeError(f"self-play worker failed: {errors[0]}")
    total.seconds = time.perf_counter() - start
    return total


def run_selfplay(config: SelfPlayConfig, evaluator: Evaluator | None = None) -> SelfPlayStats:
    """Play `config.games` games and write them to one new file per process under `config.out_dir`."""
    config.validate()
    Path(config.out_dir).mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    with _stop_on_signals(stop):
        if config.processes > 1:
            if evaluator is not None:
                raise ValueError("processes > 1 builds one evaluator per worker; do not pass one")
            return _run_processes(config, stop)
        if evaluator is None:
            evaluator = _make_evaluator(config)
        start = time.perf_counter()
        stats = SelfPlayStats()
        with _progress_bar(config) as bar:
            return _run_here(
                config,
                evaluator,
                range(config.games),
                lambda n, r: (stats.add_game(n, r), _show(bar, stats, start)),
                stop,
            )
