"""One node's self-play in a Ray cluster: an actor that plays the game ids the driver gives it with
today's multi-process self-play (its worker processes, its own inference server and engine build), and
holds the finished games, whole and hcpe3-encoded, until the driver takes them. It writes no run file:
the driver is the only writer, so the nodes need no shared filesystem.

The actor plays one unit (a list of game ids) after another from its queue, each with the newest model
it was sent (through Ray's object store) when the unit starts, and labels every game with that model.
Ray is not imported here: the driver wraps this class with `ray.remote`.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.selfplay.config import SelfPlayConfig

STOP_JOIN_S = 120.0  # how long `stop` waits for the running unit to flush its finished games


class SelfPlayActor:
    """The node side of `engine.selfplay.cluster`: submit units, take games, stop."""

    def __init__(self, config: SelfPlayConfig) -> None:
        self.config = config
        self.workdir = Path(tempfile.mkdtemp(prefix="gumbel-shogi-actor-"))
        self.model: str | None = config.model
        self.model_label = "given"
        self.units: queue.Queue[list[int] | None] = queue.Queue()
        self.outbox: list[tuple[int, bytes, str]] = []
        self.changed = threading.Condition()
        self.busy = 0.0  # seconds spent in finished units
        self.unit_started: float | None = None
        self.units_done = 0
        self.error: tuple[str, str] | None = None  # (kind, message): the driver stops the run
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._play, name="selfplay-actor", daemon=True)
        self.thread.start()

    def info(self) -> dict[str, Any]:
        """Where this actor runs (the progress bar shows games per node)."""
        import ray

        context = ray.get_runtime_context()
        return {
            "node_id": context.get_node_id(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "cpus": os.cpu_count(),
            "gpus": context.get_accelerator_ids().get("GPU", []),
        }

    def set_model(self, label: str, data: bytes | None, suffix: str) -> None:
        """Play the next units with this model (None data: the default network)."""
        if data is None:
            path = None
        else:
            path = self.workdir / f"model-{label}{suffix}"
            if not path.exists():
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_bytes(data)
                tmp.rename(path)
        with self.changed:
            self.model, self.model_label = (str(path) if path else None), label

    def submit(self, ids: list[int]) -> None:
        self.units.put(list(ids))

    def take(self, wait_s: float = 1.0) -> dict[str, Any]:
        """The games finished since the last take (waiting up to `wait_s` for one), the seconds spent
        playing, and the units finished; an error ends the driver's run."""
        with self.changed:
            if not self.outbox and self.error is None:
                self.changed.wait(wait_s)
            games, self.outbox = self.outbox, []
            running = time.perf_counter() - self.unit_started if self.unit_started is not None else 0.0
            return {
                "games": games,
                "busy": self.busy + running,
                "units_done": self.units_done,
                "error": self.error,
            }

    def stop(self) -> dict[str, Any]:
        """End the running unit after its current step (its finished games kept) and play no more."""
        self.stop_event.set()
        self.units.put(None)
        self.thread.join(STOP_JOIN_S)
        shutil.rmtree(self.workdir, ignore_errors=True)
        return self.take(0)

    def _keep(self, label: str, game_id: int, data: bytes) -> None:
        with self.changed:
            self.outbox.append((game_id, data, label))
            self.changed.notify_all()

    def _play(self) -> None:
        from engine.selfplay.processes import run_selfplay

        while not self.stop_event.is_set():
            ids = self.units.get()
            if ids is None:
                break
            with self.changed:
                model, label = self.model, self.model_label
                self.unit_started = time.perf_counter()
            config = dataclasses.replace(
                self.config,
                games=len(ids),
                parallel=min(self.config.parallel, len(ids)),
                model=model,
                out_dir=self.workdir,
                progress=False,
            )
            try:
                run_selfplay(
                    config,
                    ids=ids,
                    on_record=lambda i, d, lb=label: self._keep(lb, i, d),
                    stop=self.stop_event,
                )
            except UserError as e:
                self._fail("user_error", str(e))
            except Exception as e:
                self._fail("error", f"{type(e).__name__}: {e}")
            with self.changed:
                self.busy += time.perf_counter() - self.unit_started
                self.unit_started = None
                self.units_done += 1
                self.changed.notify_all()

    def _fail(self, kind: str, message: str) -> None:
        with self.changed:
            self.error = (kind, message)
            self.changed.notify_all()
        self.stop_event.set()
