"""Several batches in flight (UCT_Threads): each evaluator answers its own batches in a thread beside the
search, every search ends with a clean tree (no virtual loss, nothing pending), and a failing network call
leaves a search that still works."""

import threading

import cshogi
import pytest

from engine.backends.evaluator import Evaluator
from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.features import FEATURES2_NUM
from engine.core.network import build, preset
from engine.play.network import slot_threads
from engine.search.control import SearchControl
from engine.search.puct import PuctParams, Search
from engine.search.puct_tree import FastSearch

MATE_IN_3 = "8k/9/7L1/7s1/9/9/9/9/4K4 b R 1"
NET = build(preset("tiny"), seed=0)


class Recording(Evaluator):
    """A tiny net's evaluator that records the thread of each call and can fail its next one."""

    def __init__(self, max_batch: int = 8) -> None:
        self.inner = TorchEvaluator(NET, max_batch=max_batch)
        self.threads: list[str] = []
        self.fail_next = False
        super().__init__(max_batch, self.inner.input2)

    def _alloc_host(self, shape1, shape2):
        return self.inner.x1, self.inner.x2

    def _run(self, n):
        self.threads.append(threading.current_thread().name)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("network call failed")
        return self.inner.evaluate(n)


def clean(search) -> bool:
    """No virtual loss and no pending leaf anywhere in the tree."""
    if isinstance(search, FastSearch):
        t = search.tree
        size = int(t.size[0])
        counted = [int(t.cn[t.edge_slice(i)].sum()) == t.nn[i] for i in range(size) if t.count[i]]
        return all(counted) and not t.pending[:size].any()
    stack = [search.root]
    while stack:
        node = stack.pop()
        if node.pending or (node.child_n is not None and node.child_n.sum() != node.n):
            return False
        stack.extend(c for c in node.children if c is not None)
    return True


both_trees = pytest.mark.parametrize("search_type", [Search, FastSearch])


@both_trees
@pytest.mark.parametrize("slots", [2, 3])
def test_every_slot_evaluates_beside_the_search_and_the_tree_ends_clean(search_type, slots):
    evs = [Recording() for _ in range(slots)]
    s = search_type(evs[0], PuctParams(), batch_size=8, spares=evs[1:])
    s.set_position(cshogi.STARTING_SFEN, [cshogi.Board().move_from_usi("7g7f")])
    r = s.run(SearchControl(max_playouts=120))
    assert 120 <= r.playouts <= 120 + slots * 8  # the calls in flight at the stop are finished
    assert r.bestmove in set(s.board.legal_moves)
    assert r.playouts == s.root.n == s.root.child_n.sum() and clean(s)
    for ev in evs:
        assert ev.threads[-1].startswith("nn-slot")  # each slot's calls ran off the search's thread
    assert s.ev is evs[0]
    assert not any(t.name.startswith("nn-slot") for t in threading.enumerate())  # the pool was shut down


@both_trees
def test_two_slots_still_prove_a_mate_and_keep_the_subtree(search_type):
    evs = [Recording(4), Recording(4)]
    s = search_type(evs[0], PuctParams(leaf_mate_plies=3), batch_size=4, spares=evs[1:])
    s.set_position(MATE_IN_3, [])
    r = s.run(SearchControl(max_playouts=256))
    assert r.value == 1.0
    s.set_position(cshogi.STARTING_SFEN, [])
    s.run(SearchControl(max_playouts=64))
    best = s.result(SearchControl()).bestmove
    s.set_position(cshogi.STARTING_SFEN, [best])  # a child of the old root: its subtree is kept
    assert s.nodes > 1 and clean(s)


@both_trees
def test_a_failed_call_drops_the_tree_and_the_next_search_works(search_type):
    evs = [Recording(), Recording()]
    s = search_type(evs[0], PuctParams(), batch_size=8, spares=evs[1:])
    s.set_position(cshogi.STARTING_SFEN, [])
    evs[1].fail_next = True
    with pytest.raises(RuntimeError, match="network call failed"):
        s.run(SearchControl(max_playouts=200))
    assert s.root is None and s.ev is evs[0]  # leaves of the failed call held virtual losses
    s.set_position(cshogi.STARTING_SFEN, [])
    r = s.run(SearchControl(max_playouts=64))
    assert r.bestmove in set(s.board.legal_moves) and clean(s)


def test_spares_must_run_the_same_network():
    other = Recording()
    other.input2 = FEATURES2_NUM + 1  # as a network with other input planes would say
    with pytest.raises(ValueError, match="same network"):
        Search(Recording(), spares=[other])


@pytest.mark.parametrize(
    "option,slots,cores,want",
    [(0, 1, 2, None), (0, 2, 2, 1), (0, 2, 16, 8), (0, 4, 2, 1), (3, 2, 2, 3)],
)
def test_slots_share_the_cores_unless_threads_is_set(option, slots, cores, want):
    assert slot_threads(option, slots, cores) == want
