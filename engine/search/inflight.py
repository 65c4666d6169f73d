"""The network calls a search keeps in flight (dlshogi's UCT_Threads, with one thread walking the tree):
one slot per evaluator, each with its own input buffers. A batch is collected into the free slot's
buffers and its call started in a thread of its own, so a runtime that leaves the GIL (onnxruntime, a
GPU) works while the search walks the tree for the next batch; the search finishes the oldest call once
every slot is busy. With one slot each call is made at once in the caller's thread: the plain
collect-evaluate-expand loop, with no thread at all."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from engine.backends.evaluator import Evaluator, Outputs, Pending


class InFlight:
    """Calls in the order they were started; use as a context manager (the threads end with it)."""

    def __init__(self, slots: Sequence[Evaluator]) -> None:
        self.slots = list(slots)
        self._next = 0  # the free slot: the one after the newest call's
        self._calls: deque[tuple[list, Pending]] = deque()
        self._pool = ThreadPoolExecutor(len(self.slots), "nn-slot") if len(self.slots) > 1 else None

    def __len__(self) -> int:
        return len(self._calls)

    @property
    def full(self) -> bool:
        return len(self._calls) == len(self.slots)

    @property
    def free(self) -> Evaluator:
        """The slot whose buffers the next batch is collected into (none of its calls is running)."""
        if self.full:
            raise RuntimeError("every slot has a call in flight: finish the oldest first")
        return self.slots[self._next]

    def start(self, batch: list) -> None:
        """Evaluate the free slot's first len(batch) rows; `batch` comes back with the outputs."""
        ev = self.free
        if self._pool is None:
            out = ev.evaluate(len(batch))
            self._calls.append((batch, lambda: out))
        else:
            self._calls.append((batch, self._pool.submit(ev.evaluate, len(batch)).result))
        self._next = (self._next + 1) % len(self.slots)

    def finish_oldest(self) -> tuple[list, Outputs]:
        """The oldest call's batch and outputs, waiting for them (its error, if it failed)."""
        batch, call = self._calls.popleft()
        return batch, call()

    def close(self) -> None:
        """Wait for the calls still running (they write into the slots' buffers); end the threads."""
        if self._pool is not None:
            self._pool.shutdown()

    def __enter__(self) -> InFlight:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
