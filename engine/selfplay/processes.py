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
import multiprocessing as mp
import pickle
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as ready_connections

from engine.backends.evaluator import Evaluator
from engine.backends.inference_server import ClientEvaluator, Endpoint
from engine.errors import UserError
from engine.selfplay.config import EvaluatorFactory, OnGame, SelfPlayConfig
from engine.selfplay.runner import progress_bar, run_here, show_progress, warn
from engine.selfplay.servers import Servers, server_factories
from engine.selfplay.stats import SelfPlayStats
from engine.selfplay.writer import OnRecord

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


def _worker(
    config: SelfPlayConfig,
    index: int,
    indices: Sequence[int],
    events: Connection,
    stop: StopFlag,
    endpoints: list[Endpoint] | None,
    records: bool = False,
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
            on_record: OnRecord | None = None
            if records:  # whole games go up the pipe, not into a file of this process
                on_record = lambda game_id, data: events.send(("record", game_id, data))  # noqa: E731
            stats = run_here(
                config, clients, indices, on_game, local_stop, tag, lambda _: None, ready, on_record
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


def _split(ids: Sequence[int], parts: int) -> list[Sequence[int]]:
    games = len(ids)
    bounds = [games * i // parts for i in range(parts + 1)]
    return [ids[bounds[i] : bounds[i + 1]] for i in range(parts)]


class _Workers:
    """The parent's view of the worker processes: live progress, final stats, failures and deaths
    (a worker whose pipe ends before its report died: killed or crashed)."""

    def __init__(
        self,
        config: SelfPlayConfig,
        procs: list,
        events: list[Connection],
        stop_all: StopFlag,
        on_record: OnRecord | None = None,
    ) -> None:
        self.config, self.procs, self.events, self.stop_all = config, procs, events, stop_all
        self.on_record = on_record
        self.live = [SelfPlayStats() for _ in procs]  # from game events: what a dead worker finished
        self.done: dict[int, SelfPlayStats] = {}
        self.dead: set[int] = set()
        self.errors: list[str] = []
        self.user_errors: list[str] = []
        self.reported: set[int] = set()

    def _handle(self, index: int, event: tuple) -> None:
        kind, *rest = event
        if kind == "record":
            assert self.on_record is not None
            self.on_record(*rest)
            return
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
    config: SelfPlayConfig,
    stop: threading.Event,
    shared: EvaluatorFactory | None,
    ids: Sequence[int],
    on_record: OnRecord | None,
) -> SelfPlayStats:
    ctx = mp.get_context("spawn")
    stop_all: StopFlag = ctx.RawValue("b", 0)
    parts = [r for r in _split(ids, config.processes) if len(r)]
    servers = Servers(config, parts, server_factories(config, shared), ctx)
    endpoints = servers.start()
    if stop.is_set() and servers.servers:  # interrupted while the servers built their evaluators
        servers.close()
        return SelfPlayStats(interrupted=True)
    try:
        pipes = [ctx.Pipe(duplex=False) for _ in parts]  # (parent's receiving end, worker's sending end)
        procs = [
            ctx.Process(
                target=_worker,
                args=(config, i, r, pipes[i][1], stop_all, endpoints[i], on_record is not None),
                name=f"selfplay-w{i}",
                daemon=True,
            )
            for i, r in enumerate(parts)
        ]
        for p in procs:
            p.start()
        for _, sender in pipes:
            sender.close()  # the worker's copy is the only one: its death ends the pipe
        servers.handed_over()
        workers = _Workers(config, procs, [receiver for receiver, _ in pipes], stop_all, on_record)
        total = workers.collect(stop)
    finally:
        served = servers.close()
    if workers.user_errors:
        raise UserError(workers.user_errors[0])
    if workers.errors:
        why = f" (inference server: {servers.error})" if servers.error else ""
        raise RuntimeError(f"self-play worker failed: {workers.errors[0]}{why}")
    total.servers = servers.figures(served)
    total.server_calls = sum(f["calls"] for f in total.servers)
    total.server_busy = sum(f["busy"] for f in total.servers)
    # stopped before every game was played, even before any started (during an engine build, say)
    total.interrupted = total.interrupted or (stop.is_set() and total.games + total.dropped < len(ids))
    return total


def run_selfplay(
    config: SelfPlayConfig,
    evaluator: Evaluator | None = None,
    shared_evaluator: EvaluatorFactory | None = None,
    *,
    ids: Sequence[int] | None = None,
    on_record: OnRecord | None = None,
    stop: threading.Event | None = None,
) -> SelfPlayStats:
    """Play `config.games` games and write them to one new file per process under `config.out_dir`.

    shared_evaluator: a picklable max_batch -> Evaluator run by each inference server for its workers
    (benchmarks and tests: a latency model, a test network); by default the configured model.
    ids: the games' indices, which seed them (default 0..games-1); on_record: finished games go to it,
    whole and hcpe3-encoded, instead of into files (a cluster actor); stop: set it to end the run early,
    every finished game kept (SIGINT/SIGTERM set it too, in the main thread)."""
    config.validate()
    ids = range(config.games) if ids is None else ids
    if len(ids) != config.games:
        raise ValueError(f"{len(ids)} game ids for {config.games} games")
    if on_record is not None and config.format != "hcpe3":
        raise UserError("games sent to a cluster's driver travel as hcpe3: not with --format data")
    stop = stop or threading.Event()
    with stop_on_signals(stop):
        if (
            config.processes > 1
            or shared_evaluator is not None
            or config.inference_server == "on"
            or config.devices
        ):
            if evaluator is not None:
                raise ValueError("worker processes build their evaluator or share the server's; pass none")
            return _run_processes(config, stop, shared_evaluator, ids, on_record)
        start = time.perf_counter()
        stats = SelfPlayStats()
        with ExitStack() as stack:
            bars = []  # drawn once set-up is done: a run refused at set-up shows no bar
            return run_here(
                config,
                None if evaluator is None else [evaluator],
                ids,
                lambda *game: (stats.add_game(*game), show_progress(bars[0], stats, start)),
                stop,
                ready=lambda: bars.append(stack.enter_context(progress_bar(config))),
                on_record=on_record,
            )
