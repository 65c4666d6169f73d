"""Self-play across machines on Ray: the driver's side.

`ClusterSelfPlay` connects to a Ray cluster (`connect`: a clear line for a bad address, no cluster or a
Ray version mismatch), starts one `cluster_actor.SelfPlayActor` per GPU (per node on a CPU cluster),
ships the model through Ray's object store, hands out game ids in units and takes the finished games
back in whole-game chunks. It is the only writer of the run folder (`run_folder.RunWriter`: hcpe3 plus a
manifest of game ids, nodes and models), so nothing needs a shared filesystem.

Faults: an actor whose process dies, or whose node leaves, is replaced (on its node if still there,
else on the least loaded one); the games it had delivered are on disk, the ids it had not go back to the
pool and are played again with the same seeds, and an id is written at most once. SIGINT/SIGTERM stop
the actors after their current step, write every finished game they hold and leave a folder a rerun
completes (`run_cluster_selfplay` plays only the ids not in the folder's manifests).
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from engine.console import say
from engine.errors import UserError
from engine.selfplay.config import SelfPlayConfig
from engine.selfplay.ray_connect import connect
from engine.selfplay.run_folder import Done, RunWriter, read_done

GROW_EVERY_S = 10.0  # how often the driver looks for nodes that joined
UNITS_AHEAD = 2  # units queued per actor (one playing, one waiting): no idle gap between units
TAKE_WAIT_S = 1.0
STOP_WAIT_S = 150.0
HEADER_MOVES = slice(32, 34)  # an encoded hcpe3 game's moveNum (u2 after the 32-byte start hcp)


class IdSource:
    """Game ids to hand out: a fixed set (a self-play target) or an endless count (the loop); ids of
    units lost with an actor come back first."""

    def __init__(self, ids: Iterable[int] | None = None, start: int = 0) -> None:
        self._fixed = None if ids is None else deque(sorted(ids))
        self._next = start
        self._back: deque[int] = deque()

    def take(self, n: int) -> list[int]:
        out = [self._back.popleft() for _ in range(min(n, len(self._back)))]
        if self._fixed is not None:
            out += [self._fixed.popleft() for _ in range(min(n - len(out), len(self._fixed)))]
        else:
            k = n - len(out)
            out += range(self._next, self._next + k)
            self._next += k
        return out

    def give_back(self, ids: Iterable[int]) -> None:
        self._back.extend(sorted(ids))

    @property
    def empty(self) -> bool:
        return not self._back and self._fixed is not None and not self._fixed


@dataclass
class Target:
    """A folder to fill: the games it must hold, those it had, its writer, and the models whose games
    it takes (None: any; the loop's window by model age leaves older ones out)."""

    folder: Path
    games: int
    had: int
    writer: RunWriter
    models: frozenset[str] | None = None

    @property
    def full(self) -> bool:
        return self.had + self.writer.games >= self.games

    def takes(self, model: str) -> bool:
        return not self.full and (self.models is None or model in self.models)


@dataclass
class _Slot:
    """One actor as the driver sees it."""

    actor: Any
    node_id: str
    node: str
    units: deque = field(default_factory=deque)  # submitted, unfinished units (lists of ids)
    undelivered: set[int] = field(default_factory=set)
    units_done: int = 0
    take_ref: Any = None
    busy: float = 0.0  # seconds its actors (this one and those it replaced) spent playing
    busy_base: float = 0.0
    started: float = 0.0
    games: int = 0


@dataclass
class ModelBlob:
    label: str
    ref: Any  # ObjectRef of the model file's bytes, or None: the default network
    suffix: str


class ClusterSelfPlay:
    """Actors on every node, the model they play, and the driver's loop that writes their games."""

    def __init__(
        self, config: SelfPlayConfig, address: str, prog: str = "selfplay", unit_games: int | None = None
    ) -> None:
        self.config, self.prog = config, prog
        self.ray = connect(address)
        self.unit_games = unit_games
        self.slots: list[_Slot] = []
        self.model: ModelBlob | None = None
        self.restarts = 0
        self.duplicates = 0
        self.surplus = 0
        self.positions = 0
        self.error: tuple[str, str] | None = None
        self._seen: set[int] = set()
        self._started = self._looked = time.perf_counter()
        try:
            self._check_resources()
            self._start_actors()
        except BaseException:
            self.close()
            raise

    # ----- set-up -----

    def _alive_nodes(self) -> list[dict]:
        return [n for n in self.ray.nodes() if n.get("Alive")]

    def _check_resources(self) -> None:
        gpus = self.ray.cluster_resources().get("GPU", 0)
        if self.config.backend == "trt" and not gpus:
            raise UserError("--trt: the Ray cluster has no GPU (TensorRT needs one per node)")

    def _spawn(self, node_id: str, gpu: bool) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from engine.selfplay.cluster_actor import SelfPlayActor

        remote = self.ray.remote(SelfPlayActor).options(
            num_cpus=0,  # it uses the node's cores through its own processes; Ray tasks may still run
            num_gpus=1 if gpu else 0,
            max_concurrency=4,  # take/submit/stop while a unit plays
            max_restarts=0,  # the driver replaces it, knowing which of its games arrived
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        )
        config = self.config
        if gpu and not config.devices and config.device in (None, "cpu"):
            config = _replace(config, device="cuda")
        return remote.remote(_replace(config, progress=False))

    def _plan(self) -> list[tuple[str, bool]]:
        """(node id, with a GPU) per actor: one per GPU of each node, one per node without GPUs."""
        plan = []
        for node in self._alive_nodes():
            gpus = int(node.get("Resources", {}).get("GPU", 0))
            plan += [(node["NodeID"], True)] * gpus or [(node["NodeID"], False)]
        if not plan:
            raise UserError("the Ray cluster has no live node")
        return plan

    def _grow(self) -> None:
        """Start actors on nodes that joined since the last look (`ray start --address` while it runs)."""
        now = time.perf_counter()
        if now - self._looked < GROW_EVERY_S:
            return
        self._looked = now
        known = {s.node_id for s in self.slots}
        new = [(n, gpu) for n, gpu in self._plan() if n not in known]
        if new:
            self._start_actors(new)
            say(f"{self.prog}: {len(new)} actor(s) started on {len({n for n, _ in new})} new node(s)")

    def _start_actors(self, plan: list[tuple[str, bool]] | None = None) -> None:
        plan = plan or self._plan()
        actors = [self._spawn(node_id, gpu) for node_id, gpu in plan]
        infos = self.ray.get([a.info.remote() for a in actors])
        now = time.perf_counter()
        for actor, info, (node_id, _) in zip(actors, infos, plan, strict=True):
            label = f"{info['host']}/{node_id[:6]}" + (f"/gpu{info['gpus'][0]}" if info["gpus"] else "")
            self.slots.append(_Slot(actor, node_id, label, started=now))
            if self.model is not None:
                self.ray.get(actor.set_model.remote(self.model.label, self.model.ref, self.model.suffix))

    def publish(self, model: str | Path | None, label: str | None = None) -> None:
        """Play every later unit with `model` (the default network if None): its bytes go to each node
        once, through the object store."""
        from engine.backends.choose import default_model_path

        path = Path(model) if model else default_model_path()
        data = path.read_bytes() if path is not None else None
        label = label or (hashlib.sha256(data).hexdigest()[:12] if data is not None else "random-init")
        ref = self.ray.put(data)
        self.model = ModelBlob(label, ref, path.suffix if path is not None else "")
        self.ray.get([s.actor.set_model.remote(label, ref, self.model.suffix) for s in self.slots])

    # ----- the driver's loop -----

    def _unit(self, source: IdSource) -> int:
        if self.unit_games:
            return self.unit_games
        return max(1, 2 * self.config.parallel * self.config.processes)

    def _top_up(self, slot: _Slot, source: IdSource, ahead: int) -> None:
        while len(slot.units) < ahead:
            ids = source.take(self._unit(source))
            if not ids:
                return
            slot.units.append(ids)
            slot.undelivered.update(ids)
            slot.actor.submit.remote(ids)

    def _write(self, slot: _Slot, targets: list[Target], games: list[tuple[int, bytes, str]]) -> None:
        for game_id, data, model in games:
            if game_id not in slot.undelivered or game_id in self._seen:
                self.duplicates += 1
                continue
            slot.undelivered.discard(game_id)
            target = next((t for t in targets if t.takes(model)), None)
            if target is None:
                self.surplus += 1
                continue
            self._seen.add(game_id)
            meta = {"model": model, "node": slot.node}
            target.writer.write(game_id, data, meta)
            slot.games += 1
            self.positions += int.from_bytes(data[HEADER_MOVES], "little")

    def _report(self, slot: _Slot, report: dict, targets: list[Target], source: IdSource) -> None:
        self._write(slot, targets, report["games"])
        slot.busy = slot.busy_base + report["busy"]
        for _ in range(report["units_done"] - slot.units_done):
            unit = slot.units.popleft()
            lost = [i for i in unit if i in slot.undelivered]  # dropped or cut short: play them again
            slot.undelivered.difference_update(lost)
            source.give_back(i for i in lost if i not in self._seen)
        slot.units_done = report["units_done"]
        if report["error"] is not None and self.error is None:
            self.error = tuple(report["error"])

    def _replace(self, slot: _Slot, source: IdSource, why: str) -> None:
        self.restarts += 1
        if self.restarts > 4 * len(self.slots) + 4:
            raise RuntimeError(f"self-play actors keep dying (last: {why})")
        source.give_back(i for i in slot.undelivered if i not in self._seen)
        alive = {n["NodeID"] for n in self._alive_nodes()}
        if not alive:
            raise UserError("every node of the Ray cluster has left")
        node_id = slot.node_id
        if node_id not in alive:
            counts = {n: sum(s.node_id == n for s in self.slots) for n in alive}
            node_id = min(counts, key=counts.get)
        say(f"{self.prog}: warning: the actor on {slot.node} died ({why}); "
            f"{len(slot.undelivered)} unfinished games go back to the pool, restarting it")  # fmt: skip
        gpu = "/gpu" in slot.node
        with_gpu = gpu and self.ray.cluster_resources().get("GPU", 0) > 0
        slot.actor = self._spawn(node_id, with_gpu)
        if self.model is not None:
            self.ray.get(slot.actor.set_model.remote(self.model.label, self.model.ref, self.model.suffix))
        slot.node_id, slot.units, slot.undelivered = node_id, deque(), set()
        slot.units_done, slot.take_ref, slot.busy_base = 0, None, slot.busy

    def collect(
        self,
        targets: list[Target],
        source: IdSource,
        stop: threading.Event,
        until: Callable[[], bool] | None = None,
        bar: tqdm | None = None,
    ) -> None:
        """Hand out ids and write the games that come back until every target is full, or `until()`
        says so, or `stop` is set; the actors play on (their units queued) unless stopped."""
        ray = self.ray
        while not stop.is_set() and self.error is None:
            if until is not None and until():
                break
            if until is None and all(t.full for t in targets):
                break
            self._grow()
            if not all(t.full for t in targets):
                for ahead in range(1, UNITS_AHEAD + 1):  # every actor one unit before any gets a second
                    for slot in self.slots:
                        self._top_up(slot, source, ahead)
            for slot in self.slots:
                if slot.take_ref is None:
                    slot.take_ref = slot.actor.take.remote(TAKE_WAIT_S)
            refs = {s.take_ref: s for s in self.slots}
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=TAKE_WAIT_S + 1)
            for ref in ready:
                slot = refs[ref]
                slot.take_ref = None
                before = slot.games
                try:
                    report = ray.get(ref)
                except ray.exceptions.RayError as e:
                    self._replace(slot, source, type(e).__name__)
                    continue
                self._report(slot, report, targets, source)
                if bar is not None and slot.games > before:
                    self._show(bar, slot.games - before)
        self.raise_error()

    @contextmanager
    def background(self, targets: list[Target], source: IdSource) -> Iterator[None]:
        """Collect in a thread while the caller works (the loop trains in the main thread, where its
        signal handling lives); on leaving, the thread ends and its error, if any, is raised."""
        done, errors = threading.Event(), []

        def work() -> None:
            try:
                self.collect(targets, source, threading.Event(), until=done.is_set)
            except BaseException as e:
                errors.append(e)

        thread = threading.Thread(target=work, name="cluster-collect", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
        if errors:
            raise errors[0]

    def stop_actors(self, targets: list[Target]) -> None:
        """Stop every actor after its current step and write the finished games it still holds."""
        refs = {s.actor.stop.remote(): s for s in self.slots}
        done, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=STOP_WAIT_S)
        for slot in self.slots:
            if slot.take_ref is not None:  # a take that was in flight holds games too
                try:
                    self._write(slot, targets, self.ray.get(slot.take_ref, timeout=STOP_WAIT_S)["games"])
                except Exception:  # noqa: BLE001 - a dead actor's last take: its games are replayed
                    pass
                slot.take_ref = None
        for ref in done:
            try:
                report = self.ray.get(ref)
            except self.ray.exceptions.RayError:
                continue
            self._write(refs[ref], targets, report["games"])

    def raise_error(self) -> None:
        if self.error is not None:
            kind, message = self.error
            raise (UserError if kind == "user_error" else RuntimeError)(message)

    def _show(self, bar: tqdm, n: int) -> None:
        hours = max(time.perf_counter() - self._started, 1e-9) / 3600
        nodes: dict[str, int] = {}
        for s in self.slots:
            nodes[s.node] = nodes.get(s.node, 0) + s.games
        text = " ".join(f"{node} {g / hours:.0f}" for node, g in nodes.items())
        bar.set_postfix_str(f"games/h {text} total {sum(nodes.values()) / hours:.0f}", refresh=False)
        bar.update(n)

    def utilisation(self) -> float:
        """The share of the actors' wall time spent playing units."""
        now = time.perf_counter()
        wall = sum(now - s.started for s in self.slots)
        return sum(s.busy for s in self.slots) / wall if wall > 0 else 0.0

    def node_games(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.slots:
            out[s.node] = out.get(s.node, 0) + s.games
        return out

    def close(self) -> None:
        for s in self.slots:
            try:
                self.ray.kill(s.actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.slots = []
        if self.ray.is_initialized():
            self.ray.shutdown()


def _replace(config: SelfPlayConfig, **changes: Any) -> SelfPlayConfig:
    import dataclasses

    return dataclasses.replace(config, **changes)


@dataclass
class ClusterReport:
    """What a cluster self-play run did (printed by bin/selfplay)."""

    target: int
    had: int
    written: int
    positions: int
    seconds: float
    nodes: dict[str, int]
    restarts: int
    utilisation: float
    interrupted: bool
    files: list[str]

    def summary(self) -> str:
        rate = self.positions / self.seconds if self.seconds > 0 else 0.0
        line = (
            f"{self.written} games, {self.positions} positions in {self.seconds:.1f}s ({rate:.1f} pos/s) "
            f"through Ray ({self.had + self.written}/{self.target} in the folder); per node: "
            + ", ".join(f"{n} {g}" for n, g in self.nodes.items())
            + f"; actors playing {100 * self.utilisation:.0f}% of the time"
        )
        if self.restarts:
            line += f"; {self.restarts} actor(s) replaced"
        if self.interrupted:
            line += " (interrupted: rerun the same command to finish)"
        return line + "".join(f"\n  wrote {f}" for f in self.files)


def run_cluster_selfplay(
    config: SelfPlayConfig, address: str, stop: threading.Event | None = None, unit_games: int | None = None
) -> ClusterReport:
    """Fill `config.out_dir` up to `config.games` whole games played on the cluster at `address`; a
    rerun plays only the game ids its manifests do not hold."""
    from engine.selfplay.processes import stop_on_signals

    config.validate()
    if config.format != "hcpe3":
        raise UserError("selfplay: --ray writes hcpe3 (game ids travel in its manifest): not --format data")
    folder = Path(config.out_dir)
    done = read_done(folder) if folder.is_dir() else Done()
    todo = _missing(done.ids, config.games - done.games)
    target = Target(folder, config.games, done.games, RunWriter(folder))
    if not todo:
        return ClusterReport(config.games, done.games, 0, 0, 0.0, {}, 0, 0.0, False, [])
    stop = stop or threading.Event()
    started = time.perf_counter()
    with ExitStack() as stack:
        pool = ClusterSelfPlay(config, address)
        stack.callback(pool.close)
        stack.enter_context(stop_on_signals(stop))  # after ray.init, which sets handlers of its own
        pool.unit_games = unit_games or max(1, -(-len(todo) // len(pool.slots)))
        pool.publish(config.model)
        bar = tqdm(
            total=config.games,
            initial=done.games,
            unit="game",
            disable=not config.progress,
            dynamic_ncols=True,
        )
        stack.enter_context(bar)
        try:
            pool.collect([target], IdSource(todo), stop, bar=bar)
        finally:
            pool.stop_actors([target])
            target.writer.close()
        return ClusterReport(
            config.games, done.games, target.writer.games, pool.positions, time.perf_counter() - started,
            pool.node_games(), pool.restarts, pool.utilisation(), not target.full,
            [str(p) for p in target.writer.paths],
        )  # fmt: skip


def _missing(done: set[int], n: int) -> list[int]:
    """The n smallest ids not done."""
    out: list[int] = []
    for i in itertools.count():
        if len(out) >= max(n, 0):
            return out
        if i not in done:
            out.append(i)
    return out
