"""The network cache shared by every search (the lc0 idea): a search asks the cache for a position,
and only misses go to the evaluator.

An entry is what a search needs to expand a position without the network or move generation: its
legal moves (cshogi order), their prior logits and the value for the side to move, keyed by the
position's Zobrist hash. The cache is bounded by entries and evicts the least recently used one at a
time, so a full cache keeps its hot positions (the current game's tree, openings) instead of being
cleared all at once.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import NamedTuple

import numpy as np


class CacheEntry(NamedTuple):
    moves: np.ndarray  # int32 legal moves
    logits: np.ndarray  # float32, one per legal move
    value: float


_entry = functools.partial(tuple.__new__, CacheEntry)  # a CacheEntry without its Python-level __new__


class EvalCache:
    """LRU map Zobrist hash -> CacheEntry holding at most `capacity` entries (0: stores nothing)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"cache capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._data: OrderedDict[int, CacheEntry] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: int) -> CacheEntry | None:
        entry = self._data.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self._data.move_to_end(key)
        return entry

    def put(self, key: int, moves: np.ndarray, logits: np.ndarray, value: float) -> None:
        """Store one position (its logits are kept, not copied)."""
        if self.capacity == 0:
            return
        data = self._data
        data[key] = _entry((moves.astype(np.int32, copy=False), logits, value))
        data.move_to_end(key)
        if len(data) > self.capacity:
            data.popitem(last=False)

    def put_many(
        self, entries: list[tuple[int, np.ndarray]], logits: np.ndarray, values: list[float]
    ) -> None:
        """Store a batch of positions: entry i is (key, int32 moves), its logits the next len(moves)
        of `logits`, its value values[i]. The logits are copied once for the batch and each entry
        keeps a view of that copy: a batch is one search round's leaves, so a cached entry holds at
        most a round's worth of other logits alive."""
        if self.capacity == 0:
            return
        data = self._data
        block = logits[: sum([len(moves) for _, moves in entries])].copy()
        o = 0
        for (key, moves), value in zip(entries, values, strict=True):
            n = len(moves)
            if key in data:
                del data[key]  # re-inserted at the most recent end
            data[key] = _entry((moves, block[o : o + n], value))
            o += n
        while len(data) > self.capacity:
            data.popitem(last=False)

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0

    def clear(self) -> None:
        """Forget every position (a new game against a different opponent, a new network)."""
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
