"""What a long `isready` is doing, told to the GUI as it goes, so that a first start does not look hung.

The first isready on a new machine exports the model to ONNX, calibrates int8 and compiles the search
kernels (numba): 20-30 s of one-time work on a small CPU, each cached on disk. The loading code names
each step (`Progress.stage`); a step that has lasted ANNOUNCE_S is announced once as `info string
<doing> (<note>)`, and whenever HEARTBEAT_S pass without a line a background thread says `info string
still preparing: <doing>, N s` (announcing the step instead if it is new), until the preparation ends
(readyok). Steps that end sooner say nothing, so a start with
warm caches stays quiet without the code having to know beforehand what is cached.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engine.paths import REPO_ROOT

ANNOUNCE_S = 1.0  # a step this long is announced; a cached one (hash, load) ends sooner
HEARTBEAT_S = 3.0  # the longest silence: well under the 5 s after which an engine looks hung
TICK_S = 0.2  # how often the heartbeat thread looks

Stage = Callable[[str, str], None]  # stage(doing, note): a step of the preparation begins


def kernel_cache_dir() -> Path:
    """Where numba caches the compiled search kernels: $NUMBA_CACHE_DIR, else `__pycache__` beside their
    sources (numba's own fallback, when that is read-only, is a folder in the user's cache)."""
    return Path(os.environ.get("NUMBA_CACHE_DIR") or REPO_ROOT / "engine" / "search" / "__pycache__")


@dataclass
class _Step:
    doing: str
    note: str
    start: float


class Progress:
    """The steps of one preparation, their seconds, and the lines due; time comes from `clock`, so the
    timing rules are tested without sleeping. Thread-safe: steps begin in the loading thread while the
    heartbeat thread asks for lines."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._step: _Step | None = None
        self._announced: set[str] = set()  # a step repeated (one per UCT thread) is announced once
        self._last_line = clock()
        self.seconds: dict[str, float] = {}  # per step, repeats summed, in the order they began

    def stage(self, doing: str, note: str = "") -> None:
        """Step `doing` begins and the previous one ends; `note` says where its result is kept."""
        with self._lock:
            now = self._clock()
            self._close(now)
            self._step = _Step(doing, note, now)

    def finish(self) -> None:
        """The last step ends; no line is due any more."""
        with self._lock:
            self._close(self._clock())
            self._step = None

    def _close(self, now: float) -> None:
        if self._step is not None:
            doing = self._step.doing
            self.seconds[doing] = self.seconds.get(doing, 0.0) + now - self._step.start

    def due(self) -> str | None:
        """The line due now, if any: the step's announcement once it has lasted ANNOUNCE_S, or when
        HEARTBEAT_S have passed since the last line (the heartbeat then, once it is announced)."""
        with self._lock:
            now, step = self._clock(), self._step
            if step is None:
                return None
            silent = now - self._last_line >= HEARTBEAT_S
            if step.doing not in self._announced and (silent or now - step.start >= ANNOUNCE_S):
                self._announced.add(step.doing)
                line = f"info string {step.doing}" + (f" ({step.note})" if step.note else "")
            elif silent:
                line = f"info string still preparing: {step.doing}, {now - step.start:.0f} s"
            else:
                return None
            self._last_line = now
            return line


@contextmanager
def heartbeat(send: Callable[[str], None]) -> Iterator[Progress]:
    """A Progress whose due lines a background thread sends (through the engine's one writer, so lines
    stay whole) until the block ends; none is sent after it."""
    progress = Progress()
    done = threading.Event()

    def beat() -> None:
        while not done.wait(TICK_S):
            line = progress.due()
            if line is not None:
                send(line)

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield progress
    finally:
        done.set()
        thread.join()
        progress.finish()
