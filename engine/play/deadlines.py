"""Deadlines within one move: the network call's time, kept in reserve, and the root mate search's share."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from engine.backends.evaluator import Evaluator
from engine.play import timeman
from engine.search.control import SearchControl


class TimedEvaluator(Evaluator):
    """The network as the engine's search sees it, timing each call (the slowest recent one, forgotten
    slowly so a passing load spike does not shorten every later move)."""

    CALL_DECAY = 0.9  # per call

    def __init__(self, inner: Evaluator) -> None:
        self.inner = inner
        self.name = inner.name
        self.call_s = 0.0
        super().__init__(inner.max_batch, inner.input2)

    def _alloc_host(self, shape1: tuple[int, ...], shape2: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        return self.inner.x1, self.inner.x2  # callers fill the wrapped evaluator's rows directly

    def _run(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        start = time.perf_counter()
        out = self.inner.evaluate(n)
        self.call_s = max(time.perf_counter() - start, self.call_s * self.CALL_DECAY)
        return out

    def close(self) -> None:
        self.inner.close()


@dataclass
class MateClock:
    """The root mate search's share of the move's time. While pondering (or in go infinite) there is no
    deadline; once ponderhit sets the hard limit the share is taken from what is left then."""

    control: SearchControl
    end: float | None = None

    def deadline(self) -> float | None:
        c = self.control
        if self.end is None and c.hard is not None and not c.infinite:
            now = time.monotonic()
            self.end = now + timeman.root_mate_ms((c.hard - now) * 1000) / 1000
        return self.end

    def stopped(self) -> bool:
        end = self.deadline()
        return self.control.stopped or (end is not None and time.monotonic() >= end)
