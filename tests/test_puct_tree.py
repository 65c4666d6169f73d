"""The fast PUCT search (flat arrays, numba descent) against the readable reference engine.search.puct.Search:
the same visit counts, values, PV and node counts, at batch 1 and with virtual loss at batch 8."""

import cshogi
import numpy as np
import pytest

import engine.search.puct_tree
from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.network import build, preset
from engine.search.control import SearchControl
from engine.search.puct import PuctParams, Search
from engine.search.puct_tree import FastSearch

MATE_IN_1 = "4k4/9/4P4/9/9/9/9/9/4K4 b G2r2b3g4s4n4l17p 1"


@pytest.fixture(scope="module")
def evaluator():
    return TorchEvaluator(build(preset("tiny"), seed=0), max_batch=8)


def _search(search_type, evaluator, sfen, moves, playouts, batch, params=None):
    s = search_type(evaluator, params or PuctParams(), batch_size=batch)
    s.set_position(sfen, moves)
    r = s.run(SearchControl(max_playouts=playouts))
    return s, r


def _assert_same_tree(ref, fast):
    (s_ref, r_ref), (s_fast, r_fast) = ref, fast
    assert r_fast.bestmove == r_ref.bestmove and r_fast.pv == r_ref.pv
    assert (r_fast.playouts, r_fast.nodes, r_fast.seldepth) == (r_ref.playouts, r_ref.nodes, r_ref.seldepth)
    assert r_fast.value == pytest.approx(r_ref.value, rel=1e-9)
    np.testing.assert_array_equal(s_fast.root.moves, s_ref.root.moves)
    np.testing.assert_array_equal(s_fast.root.child_n, s_ref.root.child_n)
    np.testing.assert_allclose(s_fast.root.child_w, s_ref.root.child_w, rtol=1e-9)


@pytest.mark.parametrize("batch", [1, 8])
def test_same_visits_as_the_reference(evaluator, positions, batch):
    searched = 0
    for board in positions[:8]:
        if board.is_game_over():
            continue
        sfen = board.sfen()
        _assert_same_tree(*(_search(t, evaluator, sfen, [], 150, batch) for t in (Search, FastSearch)))
        searched += 1
    assert searched >= 6


def test_same_with_exact_leaves_draw_values_and_a_move_limit(evaluator):
    params = PuctParams(draw_value_black=0.2, draw_value_white=0.7, max_moves=6)
    for sfen in (MATE_IN_1, cshogi.STARTING_SFEN):
        _assert_same_tree(*(_search(t, evaluator, sfen, [], 200, 4, params) for t in (Search, FastSearch)))


def test_tree_grows_and_reuses_its_subtree_like_the_reference(evaluator, monkeypatch):
    """Arrays that must grow several times, then a descendant position searched on."""
    monkeypatch.setattr(engine.search.puct_tree, "INITIAL_NODES", 16)
    monkeypatch.setattr(engine.search.puct_tree, "INITIAL_EDGES", 600)
    runs = []
    for search_type in (Search, FastSearch):
        s, r = _search(search_type, evaluator, cshogi.STARTING_SFEN, [], 500, 8)
        if search_type is FastSearch:
            assert len(s.tree.move) > 8 * 600 and len(s.tree.nn) > 8 * 16
        s.set_position(cshogi.STARTING_SFEN, r.pv[:2])
        runs.append((s, s.run(SearchControl(max_playouts=s.root.n + 200))))
    _assert_same_tree(*runs)
