"""Running self-play: here, or in worker processes with one progress bar.

`processes > 1` runs worker processes (own search, cache and output file). Each builds its own
evaluator, or, with the inference server (`inference_server`: on, or auto with a GPU backend), all
feed one evaluator in one more process (`engine.backends.inference_server`: one GPU context and
engine build, rows of every worker in each forward call; a client per group of each worker, so
both groups' calls can be in flight). A worker that dies (killed, crashed) is reported and the
others play on; its finished games stay in its file. SIGINT/SIGTERM stop a run after the current
step, every finished game written.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import itertools
import multiprocessing as mp
import os
import pickle
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as ready_connections
from pathlib import Path

from engine.backends.evaluator import Evaluator
from engine.backends.inference_server import ClientEvaluator, Endpoint, InferenceServer
from engine.errors import UserError
from engine.selfplay.config import EvaluatorFactory, OnGame, SelfPlayConfig
from engine.selfplay.runner import (
    group_sizes,
    leaf_rows,
    make_evaluator,
    progress_bar,
    run_here,
    show_progress,
    warn,
)
from engine.selfplay.stats import SelfPlayStats

StopFlag = ctypes.c_byte  # a RawValue("b"): the parent sets .value = 1 to stop every worker; no lock
STOP_POLL_S = 0.1


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
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


def _server_evaluator(config: SelfPlayConfig, max_batch: int) -> Evaluator:
    """The inference server's evaluator: the configured model, with every CPU thread (it is the only one)."""
    return make_evaluator(config, max_batch=max_batch, threads=config.threads or os.cpu_count() or 1)


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


def _worker(
    config: SelfPlayConfig,
    index: int,
    indices: range,
    events: Connection,
    stop: StopFlag,
    endpoints: list[Endpoint] | None,
) -> None:
    """A worker process: its own file, and its own evaluator or clients of the inference server (one
    per group, so that both groups' calls can be in flight);
    progress and final stats go to the parent through its own pipe `events` (a worker killed while
    writing can garble only its own pipe)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    local_stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: local_stop.set())
    threading.Thread(target=_watch, args=(stop, local_stop), daemon=True).start()
    try:
        on_game: OnGame = lambda *game: events.send(("game", *game))  # noqa: E731
        with ExitStack() as stack:
            clients = [stack.enter_context(ClientEvaluator(e)) for e in endpoints] if endpoints else None
            tag = f"-w{index}"
            ready = lambda: events.send(("ready",))  # noqa: E731
            stats = run_here(
                config, clients, indices, on_game, local_stop, tag, log=lambda _: None, ready=ready
            )
        events.send(("done", dataclasses.asdict(stats)))
    except UserError as e:
        events.send(("user_error", str(e)))
    except BaseException as e:
        events.send(("error", f"{type(e).__name__}: {e}"))


def _watch(stop: StopFlag, local_stop: threading.Event) -> None:
    """A worker's thread that passes the parent's stop on. It polls a lock-free flag: a thread blocked in
    a multiprocessing.Event dies holding the Event's lock when its process exits, and the parent's next
    set() then waits forever (a worker refused a bad --model that way hung the run)."""
    while not local_stop.wait(STOP_POLL_S):
        if stop.value:
            local_stop.set()


def _split(games: int, parts: int) -> list[range]:
    bounds = [games * i // parts for i in range(parts + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(parts)]


class _Workers:
    """The parent's view of the worker processes: live progress, final stats, failures and deaths
    (a worker whose pipe ends before its report died: killed or crashed)."""

    def __init__(
        self, config: SelfPlayConfig, procs: list, events: list[Connection], stop_all: StopFlag
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
        if kind in ("game", "ready"):
            return
        self.reported.add(index)
        if kind == "done":
            self.done[index] = SelfPlayStats(**rest[0])
        else:
            (self.user_errors if kind == "user_error" else self.errors).append(rest[0])
            self.stop_all.value = 1  # a worker that failed (rather than died) ends the run

    def _ended(self, index: int) -> None:
        """Its pipe is closed: after its report, or it died."""
        self.events[index].close()
        if index not in self.reported:
            self.procs[index].join(5)
            self.dead.add(index)
            code = self.procs[index].exitcode
            warn(f"worker {index} died (exit code {code}); its finished games are kept, the others play on")

    def collect(self, stop: threading.Event) -> SelfPlayStats:
        start = time.perf_counter()
        shown = SelfPlayStats()
        open_pipes = dict(enumerate(self.events))
        with ExitStack() as stack:
            bar = None  # drawn once a worker is ready: a run refused at set-up shows no bar
            while open_pipes:
                if stop.is_set():
                    self.stop_all.value = 1
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
                    if event[0] in ("ready", "game") and bar is None:
                        bar = stack.enter_context(progress_bar(self.config))
                    if event[0] == "game":
                        shown.add_game(*event[1:])
                        show_progress(bar, shown, start)
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
    stop_all: StopFlag = ctx.RawValue("b", 0)
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
    with stop_on_signals(stop):
        if config.processes > 1 or shared_evaluator is not None or config.inference_server == "on":
            if evaluator is not None:
                raise ValueError("worker processes build their evaluator or share the server's; pass none")
            return _run_processes(config, stop, shared_evaluator)
        start = time.perf_counter()
        stats = SelfPlayStats()
        with ExitStack() as stack:
            bars = []  # drawn once set-up is done: a run refused at set-up shows no bar
            return run_here(
                config,
                None if evaluator is None else [evaluator],
                range(config.games),
                lambda *game: (stats.add_game(*game), show_progress(bars[0], stats, start)),
                stop,
                ready=lambda: bars.append(stack.enter_context(progress_bar(config))),
            )
