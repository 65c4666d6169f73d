"""The network cache shared by the searches: bounded, least recently used out first, hit rate."""

import numpy as np
import pytest

from engine.search.eval_cache import EvalCache


def _put(cache, key):
    cache.put(key, np.array([key], dtype=np.int32), np.array([0.5], dtype=np.float32), key / 10)


def test_never_grows_past_its_bound_and_evicts_least_recently_used():
    cache = EvalCache(3)
    for key in (1, 2, 3):
        _put(cache, key)
    assert cache.get(1).value == 0.1  # 1 is now the most recently used; 2 the least
    _put(cache, 4)
    assert len(cache) == 3
    assert cache.get(2) is None and cache.get(1) is not None and cache.get(4) is not None
    for key in range(100, 200):
        _put(cache, key)
        assert len(cache) <= 3
    assert cache.get(199) is not None and cache.get(4) is None


def test_hit_rate_counts_lookups():
    cache = EvalCache(10)
    assert cache.hit_rate == 0.0
    _put(cache, 7)
    cache.get(7)
    cache.get(8)
    cache.get(7)
    assert (cache.hits, cache.misses) == (2, 1) and cache.hit_rate == pytest.approx(2 / 3)


def test_zero_capacity_stores_nothing_and_negative_is_refused():
    cache = EvalCache(0)
    _put(cache, 1)
    assert len(cache) == 0 and cache.get(1) is None
    with pytest.raises(ValueError):
        EvalCache(-1)
