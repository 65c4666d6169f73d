import time

import cshogi
import numpy as np
import pytest

from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.network import build, preset
from engine.search.control import SearchControl
from engine.search.gumbel_search import GumbelParams, search_position
from engine.search.puct import PuctNode, PuctParams, Search, policy_move, puct_select
from engine.search.puct_tree import FastSearch

MATE_IN_1 = "4k4/9/4P4/9/9/9/9/9/4K4 b G2r2b3g4s4n4l17p 1"
MATE_IN_3 = "8k/9/7L1/7s1/9/9/9/9/4K4 b R 1"  # a rook drop, then mate in one whatever White plays
MIDDLE_GAME = "ln3g1nl/1g4sk1/p1p1Pp1pp/1p2p4/3ps4/+B1P6/PPSP1PPPP/3KG4/LN3GSNL b Rrbp 51"


@pytest.fixture(scope="module")
def evaluator():
    return TorchEvaluator(build(preset("tiny"), seed=0), max_batch=8)


def legal(board, move):
    return move in set(board.legal_moves)


both_trees = pytest.mark.parametrize("search_type", [Search, FastSearch])  # reference, flat arrays


@both_trees
def test_search_respects_playouts_and_returns_legal_move(evaluator, search_type):
    s = search_type(evaluator, PuctParams(), batch_size=8)
    s.set_position(cshogi.STARTING_SFEN, [])
    r = s.run(SearchControl(max_playouts=40))
    assert 40 <= r.playouts < 40 + 8 + 1  # whole batches, one batch of overshoot at most
    assert legal(s.board, r.bestmove)
    assert r.pv[0] == r.bestmove and r.depth == len(r.pv)
    root = s.root
    assert root.n == root.child_n.sum()  # no virtual loss left behind
    assert np.isclose(root.w, root.child_w.sum())


@both_trees
def test_tree_finds_mate_in_one_with_exact_values(evaluator, search_type):
    s = search_type(evaluator, PuctParams(), batch_size=4)
    s.set_position(MATE_IN_1, [])
    r = s.run(SearchControl(max_playouts=200))
    assert cshogi.move_to_usi(r.bestmove) == "G*5b"
    assert r.mate_plies == 1 and r.value == 1.0


@both_trees
def test_leaf_mate_probe_proves_a_mate_in_three(evaluator, search_type):
    s = search_type(evaluator, PuctParams(leaf_mate_plies=3), batch_size=4)
    s.set_position(MATE_IN_3, [])
    r = s.run(SearchControl(max_playouts=256))
    assert r.value == 1.0  # exact: the search saw every reply mated, not a network's estimate
    s.board.push(r.bestmove)
    assert s.board.is_check() and s.board.is_mate(2)  # R*1d or R*2a


@both_trees
def test_subtree_is_reused_for_a_descendant(evaluator, search_type):
    s = search_type(evaluator, PuctParams(), batch_size=8)
    s.set_position(cshogi.STARTING_SFEN, [])
    r = s.run(SearchControl(max_playouts=64))
    reply = r.pv[1] if len(r.pv) > 1 else None
    assert reply is not None
    child = s.root.children[int(np.flatnonzero(s.root.moves == r.bestmove)[0])]
    grandchild = child.children[int(np.flatnonzero(child.moves == reply)[0])]
    assert grandchild is not None and grandchild.moves is not None
    kept = (grandchild.n, grandchild.child_n.copy(), grandchild.moves.copy())
    s.set_position(cshogi.STARTING_SFEN, [r.bestmove, reply])
    assert s.root.n == kept[0] and s.nodes == kept[0] + 1
    np.testing.assert_array_equal(s.root.child_n, kept[1])
    np.testing.assert_array_equal(s.root.moves, kept[2])
    s.run(SearchControl(max_playouts=kept[0] + 16))  # searching on from the kept statistics
    assert s.root.n >= kept[0] + 16
    s.set_position(cshogi.STARTING_SFEN, [])  # not a descendant: fresh tree
    assert s.root is None


@both_trees
def test_repetition_before_the_root_counts(evaluator, search_type):
    # shuffle rooks/kings back and forth: the position after 8 plies repeats the start three times
    cycle = ["5i5h", "5a5b", "5h5i", "5b5a"]
    board = cshogi.Board()
    moves = []
    for u in cycle * 3:
        m = board.move_from_usi(u)
        board.push(m)
        moves.append(m)
    s = search_type(evaluator, PuctParams(draw_value_black=0.0, draw_value_white=0.0), batch_size=4)
    s.set_position(cshogi.STARTING_SFEN, moves[:-1])  # one ply before the 4th occurrence
    r = s.run(SearchControl(max_playouts=300))
    # with a draw worth 0 to us, the repeating king move (back to 5a) must not be preferred
    assert cshogi.move_to_usi(r.bestmove) != "5b5a"


@pytest.mark.parametrize("sfen", [cshogi.STARTING_SFEN, MIDDLE_GAME])
def test_gumbel_mode_is_the_selfplay_search(evaluator, sfen):
    """Search_Mode gumbel (with its noise on) plays self-play's move and computes its policy target
    for the same seed and budget; self-play's side here is the readable reference implementation."""
    for seed in range(3):
        s = Search(evaluator, PuctParams(mode="gumbel", gumbel_noise=True), batch_size=4)
        s.set_position(sfen, [])
        r = s.run(SearchControl(max_playouts=32), rng=np.random.default_rng(seed))
        ref = search_position(
            cshogi.Board(sfen),
            evaluator,
            GumbelParams(sims=32, max_moves=None, leaf_mate_plies=PuctParams().leaf_mate_plies),
            np.random.default_rng(seed),
        )  # the engine's leaf probe: 5 plies (self-play's default is 1)
        assert r.bestmove == ref.moves[ref.choice]
        assert r.playouts == 32 and r.pv[0] == r.bestmove
        np.testing.assert_allclose(s.gumbel_result.policy, ref.policy, rtol=1e-9, atol=1e-12)


def test_gumbel_mode_takes_the_target_settings_from_its_options(evaluator):
    """Gumbel_C_Scale (percent) and Gumbel_Q_Rescale reach the engine's Gumbel search: its policy is
    self-play's for the same settings, and differs from the default's."""
    from engine.play.options import default_options, search_params

    values = {o.name: o.default for o in default_options()}
    values.update(Search_Mode="gumbel", Gumbel_C_Scale=10, Gumbel_Q_Rescale=False)
    params = search_params(values)
    assert (params.gumbel_c_scale, params.gumbel_rescale) == (0.1, False)
    policies = []
    for p in (params, PuctParams(mode="gumbel", leaf_mate_plies=params.leaf_mate_plies)):
        s = Search(evaluator, p, batch_size=4)
        s.set_position(MIDDLE_GAME, [])
        s.run(SearchControl(max_playouts=32), rng=np.random.default_rng(0))
        policies.append(s.gumbel_result.policy)
    ref = search_position(
        cshogi.Board(MIDDLE_GAME), evaluator,
        GumbelParams(sims=32, c_scale=0.1, rescale=False, max_moves=None, noise=False,
                     leaf_mate_plies=params.leaf_mate_plies),
        np.random.default_rng(0),
    )  # fmt: skip
    np.testing.assert_allclose(policies[0], ref.policy, rtol=1e-9, atol=1e-12)
    assert np.abs(policies[0] - policies[1]).max() > 1e-3


def test_gumbel_noise_is_off_in_play_unless_asked(evaluator):
    def search(seed, noise):
        s = Search(evaluator, PuctParams(mode="gumbel", gumbel_noise=noise), batch_size=4)
        s.set_position(MIDDLE_GAME, [])
        s.run(SearchControl(max_playouts=16), rng=np.random.default_rng(seed))
        return s.gumbel_result

    quiet = [search(seed, False) for seed in range(4)]
    assert all(q.choice == quiet[0].choice and np.array_equal(q.policy, quiet[0].policy) for q in quiet)
    noisy = [search(seed, True) for seed in range(4)]
    assert any(not np.array_equal(q.policy, noisy[0].policy) for q in noisy)


@both_trees
def test_stops_early_only_while_that_saves_clock_time(evaluator, search_type):
    """A decided best move ends the search before its target, unless the time left is byoyomi, lost
    if unused (`saving` past): then the search goes on for the subtree the next move reuses."""
    s = search_type(evaluator, PuctParams(), batch_size=8)
    s.set_position(cshogi.STARTING_SFEN, [])
    s.run(SearchControl(max_playouts=64))
    child_n = s.root.child_n
    child_n[int(np.argmax(child_n))] += 10  # a best move that one more playout cannot change
    control = SearchControl()
    control.target = control.hard = time.monotonic() + 60
    assert s._should_stop(control, 64, nps=1 / 60)
    control.saving = control.start  # byoyomi from the start: nothing to save
    assert not s._should_stop(control, 64, nps=1 / 60)
    control.saving = time.monotonic() + 30  # main time left until then
    assert s._should_stop(control, 64, nps=1 / 60)


def test_gumbel_mode_stops_at_the_hard_deadline(evaluator):
    s = Search(evaluator, PuctParams(mode="gumbel"), batch_size=4)
    s.set_position(cshogi.STARTING_SFEN, [])
    control = SearchControl(max_playouts=100_000)
    control.hard = control.start  # already past: the first round ends the search
    r = s.run(control, rng=np.random.default_rng(0))
    assert legal(s.board, r.bestmove) and r.playouts < 100


def test_cache_is_bounded_and_shared_by_both_modes(evaluator):
    s = Search(evaluator, PuctParams(cache_size=50), batch_size=8)
    s.set_position(cshogi.STARTING_SFEN, [])
    s.run(SearchControl(max_playouts=400))
    assert len(s.cache) == 50 and s.cache.misses > 50  # full, never past its bound
    s = Search(evaluator, PuctParams(), batch_size=8)
    s.set_position(cshogi.STARTING_SFEN, [])
    s.run(SearchControl(max_playouts=100))
    s.params.mode = "gumbel"
    s.run(SearchControl(max_playouts=32), rng=np.random.default_rng(0))
    assert s.cache.hits > 0  # the gumbel search found the PUCT search's positions


def test_puct_select_prefers_prior_then_value():
    node = PuctNode()
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
