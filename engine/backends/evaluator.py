"""The one interface between search and network: features in, policy logits and win probabilities out.

Search code (self-play, USI) only sees `Evaluator`; which runtime runs the network (torch, onnxruntime,
TensorRT) is chosen by `create_evaluator` (engine/backends/choose.py) and never leaks into the search.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import cshogi
import numpy as np

from engine.core.features import FEATURES1_NUM, FEATURES2_NUM, ensure_features2, fill_features
from engine.core.moves import NUM_MOVE_LABELS

Outputs = tuple[np.ndarray, np.ndarray]  # (policy logits [n, 2187], value [n]), float32
Pending = Callable[[], Outputs]  # waits for a submitted call's outputs


class Evaluator(ABC):
    """Fixed maximum batch and reusable host buffers `x1`, `x2`: callers fill rows 0..n-1, then
    `evaluate(n)` returns (policy logits float32 [n, 2187], value float32 [n]) where value is the
    win probability of the side to move. Returned arrays may be reused by the next call: copy them
    if they must outlive it."""

    name: str = "abstract"
    # Whether a blocking call is worth running in a thread beside the search (it spends its time outside
    # the GIL, on a GPU or in a runtime's own threads). An evaluator whose `submit` returns at once (it
    # only starts the work) says False: self-play then calls it directly, with no thread hand-off.
    overlaps: bool = True

    def __init__(self, max_batch: int, input2: int) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.max_batch = max_batch
        self.input2 = input2
        ensure_features2(input2)
        self.x1, self.x2 = self._alloc_host((max_batch, FEATURES1_NUM, 9, 9), (max_batch, input2, 9, 9))

    def _alloc_host(self, shape1: tuple[int, ...], shape2: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Host input buffers; backends override to return pinned memory."""
        return np.zeros(shape1, dtype=np.float32), np.zeros(shape2, dtype=np.float32)

    @abstractmethod
    def _run(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Evaluate rows 0..n-1 of x1/x2 (1 <= n <= max_batch)."""

    def evaluate(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if not 1 <= n <= self.max_batch:
            raise ValueError(f"batch of {n} outside 1..{self.max_batch}")
        return self._run(n)

    def evaluate_features(self, x1: np.ndarray, x2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Any number of positions, in chunks of max_batch; returns fresh arrays."""
        n = len(x1)
        policy = np.empty((n, NUM_MOVE_LABELS), dtype=np.float32)
        value = np.empty(n, dtype=np.float32)
        for start in range(0, n, self.max_batch):
            k = min(self.max_batch, n - start)
            self.x1[:k] = x1[start : start + k]
            self.x2[:k] = x2[start : start + k]
            p, v = self._run(k)
            policy[start : start + k] = p[:k]
            value[start : start + k] = v[:k]
        return policy, value

    def submit(self, x1: np.ndarray, x2: np.ndarray) -> Pending:
        """Start evaluating these rows; the returned function waits for the outputs (valid until this
        evaluator's next call). The default evaluates now; an asynchronous runtime starts the work and
        returns, so that the caller searches while it runs."""
        out = self.evaluate_features(x1, x2)
        return lambda: out

    def input_buffers(self, n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Buffers of n rows a caller may fill in place and pass to `submit` (no copy on the way in),
        or None when this evaluator has none to lend."""
        return None

    def load_rows(self, offset: int, x1: np.ndarray, x2: np.ndarray) -> None:
        """Copy rows into the host buffers from row `offset` on (a server gathering clients' rows)."""
        self.x1[offset : offset + len(x1)] = x1
        self.x2[offset : offset + len(x2)] = x2

    def evaluate_boards(self, boards: Sequence[cshogi.Board]) -> tuple[np.ndarray, np.ndarray]:
        """Convenience for tests and small callers: features made here, fresh arrays returned."""
        n = len(boards)
        policy = np.empty((n, NUM_MOVE_LABELS), dtype=np.float32)
        value = np.empty(n, dtype=np.float32)
        for start in range(0, n, self.max_batch):
            chunk = boards[start : start + self.max_batch]
            for i, board in enumerate(chunk):
                fill_features(board, self.x1[i], self.x2[i])
            p, v = self._run(len(chunk))
            policy[start : start + len(chunk)] = p[: len(chunk)]
            value[start : start + len(chunk)] = v[: len(chunk)]
        return policy, value

    def close(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release runtime resources (engines, streams); the default has none."""

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class UniformEvaluator(Evaluator):
    """A network that costs nothing: flat logits and value 0.5 at once. It measures the search's own
    ceiling (bench/search_ceiling.py) and drives search tests that must not depend on a model."""

    name = "uniform"
    overlaps = False

    def __init__(self, max_batch: int = 256, input2: int = FEATURES2_NUM) -> None:
        super().__init__(max_batch, input2)
        self._policy = np.zeros((max_batch, NUM_MOVE_LABELS), dtype=np.float32)
        self._value = np.full(max_batch, 0.5, dtype=np.float32)
        self._answer = _constant(self._policy.copy(), self._value.copy())

    def _run(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self._policy[:n], self._value[:n]

    def load_rows(self, offset: int, x1: np.ndarray, x2: np.ndarray) -> None:
        """Nothing to copy: the answer does not depend on the rows."""

    def evaluate_features(self, x1: np.ndarray, x2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The answer does not depend on the rows, so they are not even read (or copied in); it is a
        read-only view of constant arrays (grown as needed), not fresh ones."""
        n = len(x1)
        if n > len(self._answer[1]):
            self._answer = _constant(np.zeros((n, NUM_MOVE_LABELS), np.float32), np.full(n, 0.5, np.float32))
        return self._answer[0][:n], self._answer[1][:n]


def _constant(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The arrays made read-only: an answer shared by every call must not be changed by a caller."""
    for a in arrays:
        a.flags.writeable = False
    return arrays


class LatencyModelEvaluator(Evaluator):
    """A GPU stand-in for planning on CPU: a call of n rows takes `a_ms + b_ms * n` ms (per chunk of
    max_batch) on a device that runs one call at a time, returning what `inner` (default:
    UniformEvaluator) returns for the same rows. `submit` returns at once, as an asynchronous GPU call
    does, and its result waits out the call's modelled end; `evaluate` sleeps with the GIL released.
    `busy_seconds` adds up the modelled device time."""

    name = "latency-model"
    overlaps = False  # submit is asynchronous

    def __init__(
        self, max_batch: int = 256, a_ms: float = 1.0, b_ms: float = 0.01, inner: Evaluator | None = None
    ) -> None:
        if a_ms < 0 or b_ms < 0:
            raise ValueError("latency model: a_ms and b_ms must be >= 0")
        self.inner = inner or UniformEvaluator(max_batch)
        self.a_ms, self.b_ms = a_ms, b_ms
        self.busy_seconds = 0.0
        self._free_at = 0.0  # when the modelled device finishes its last call
        super().__init__(self.inner.max_batch, self.inner.input2)

    def _alloc_host(self, shape1: tuple[int, ...], shape2: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        return self.inner.x1, self.inner.x2  # callers fill the wrapped evaluator's rows directly

    def load_rows(self, offset: int, x1: np.ndarray, x2: np.ndarray) -> None:
        self.inner.load_rows(offset, x1, x2)

    def _queue(self, n: int, compute: Callable[[], Outputs]) -> tuple[float, Outputs]:
        """Run `compute` for a call of n rows now; returns when the modelled device is done with it."""
        start = max(time.perf_counter(), self._free_at)
        out = compute()
        chunks = -(-n // self.max_batch)
        seconds = max((self.a_ms * chunks + self.b_ms * n) / 1000, time.perf_counter() - start)
        self._free_at = start + seconds
        self.busy_seconds += seconds
        return self._free_at, out

    def _run(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        end, out = self._queue(n, lambda: self.inner.evaluate(n))
        _sleep_until(end)
        return out

    def submit(self, x1: np.ndarray, x2: np.ndarray) -> Pending:
        end, out = self._queue(len(x1), lambda: self.inner.evaluate_features(x1, x2))

        def wait() -> Outputs:
            _sleep_until(end)
            return out

        return wait

    def close(self) -> None:
        self.inner.close()


def _sleep_until(moment: float) -> None:
    left = moment - time.perf_counter()
    if left > 0:
        time.sleep(left)
