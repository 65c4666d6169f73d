import cshogi
import numpy as np
import pytest

from engine.backend_torch import TorchEvaluator
from engine.network import build, preset
from engine.puct import Node, Search, SearchControl, SearchParams, policy_move, puct_select

MATE_IN_1 = "4k4/9/4P4/9/9/9/9/9/4K4 b G2r2b3g4s4n4l17p 1"


@pytest.fixture(scope="module")
def evaluator():
    return TorchEvaluator(build(preset("tiny"), seed=0), max_batch=8)


def legal(board, move):
    return move in set(board.legal_moves)


def test_search_respects_playouts_and_returns_legal_move(evaluator):
    s = Search(evaluator, SearchParams(), batch_size=8)
    s.set_position(cshogi.STARTING_SFEN, [])
    r = s.run(SearchControl(max_playouts=40))
    assert 40 <= r.playouts < 40 + 8 + 1  # whole batches, one batch of overshoot at most
    assert legal(s.board, r.bestmove)
    assert r.pv[0] == r.bestmove and r.depth == len(r.pv)
    root = s.root
    assert root.n == root.child_n.sum()  # no virtual loss left behind
    assert np.isclose(root.w, root.child_w.sum())


def test_tree_finds_mate_in_one_with_exact_values(evaluator):
    s = Search(evaluator, SearchParams(), batch_size=4)
    s.set_position(MATE_IN_1, [])
    r = s.run(SearchControl(max_playouts=200))
    assert cshogi.move_to_usi(r.bestmove) == "G*5b"
    assert r.mate_plies == 1 and r.value == 1.0


def test_subtree_is_reused_for_a_descendant(evaluator):
    s = Search(evaluator, SearchParams(), batch_size=8)
    s.set_position(cshogi.STARTING_SFEN, [])
    r = s.run(SearchControl(max_playouts=64))
    reply = r.pv[1] if len(r.pv) > 1 else None
    assert reply is not None
    child = s.root.children[int(np.flatnonzero(s.root.moves == r.bestmove)[0])]
    grandchild = child.children[int(np.flatnonzero(child.moves == reply)[0])]
    s.set_position(cshogi.STARTING_SFEN, [r.bestmove, reply])
    if grandchild is not None and grandchild.moves is not None:
        assert s.root is grandchild
    s.set_position(cshogi.STARTING_SFEN, [])  # not a descendant: fresh tree
    assert s.root is None


def test_repetition_before_the_root_counts(evaluator):
    # shuffle rooks/kings back and forth: the position after 8 plies repeats the start three times
    cycle = ["5i5h", "5a5b", "5h5i", "5b5a"]
    board = cshogi.Board()
    moves = []
    for u in cycle * 3:
        m = board.move_from_usi(u)
        board.push(m)
        moves.append(m)
    s = Search(evaluator, SearchParams(draw_value_black=0.0, draw_value_white=0.0), batch_size=4)
    s.set_position(cshogi.STARTING_SFEN, moves[:-1])  # one ply before the 4th occurrence
    r = s.run(SearchControl(max_playouts=300))
    # with a draw worth 0 to us, the repeating king move (back to 5a) must not be preferred
    assert cshogi.move_to_usi(r.bestmove) != "5b5a"


def test_gumbel_root_spends_its_budget_on_halving(evaluator):
    s = Search(evaluator, SearchParams(mode="gumbel"), batch_size=4)
    s.set_position(cshogi.STARTING_SFEN, [])
    r = s.run(SearchControl(max_playouts=32), rng=np.random.default_rng(0))
    root = s.root
    assert legal(s.board, r.bestmove)
    assert root.child_n.sum() >= 32
    assert (root.child_n > 0).sum() <= 16  # only the Gumbel-top-16 actions are visited
    assert root.child_n[int(np.flatnonzero(root.moves == r.bestmove)[0])] == root.child_n.max()


def test_puct_select_prefers_prior_then_value():
    node = Node()
    node.expand(np.array([1, 2, 3]), np.log(np.array([0.1, 0.8, 0.1])), 0.5, 1.0)
    assert puct_select(node, 1.44, 28288, 0.27) == 1
    node.child_n[:] = [10, 10, 10]
    node.child_w[:] = [9.0, 1.0, 5.0]
    node.n, node.w = 30, 15.0
    assert puct_select(node, 1.44, 28288, 0.27) == 0


def test_policy_move_greedy_and_sampled():
    logits = np.array([0.0, 3.0, 1.0])
    assert policy_move(logits, 0.0, np.random.default_rng(0)) == 1
    picks = [policy_move(logits, 1.0, np.random.default_rng(i)) for i in range(200)]
    counts = np.bincount(picks, minlength=3) / 200
    assert counts[1] > 0.6 and counts[0] > 0.0
