"""The fast Gumbel search (flat-array tree, numba kernels) against the readable reference
(engine.search.gumbel_search): same moves, same policy targets, same games."""

import cshogi
import numpy as np
import pytest

import engine.selfplay.runner
from engine.backends.evaluator import UniformEvaluator
from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.network import build, preset
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.search.eval_cache import EvalCache
from engine.search.gumbel_search import GumbelParams, GumbelSearch, ReferenceGroup, search_position
from engine.search.gumbel_tree import TreeSearch
from engine.selfplay.config import SelfPlayConfig
from engine.selfplay.processes import run_selfplay


@pytest.fixture(scope="module")
def evaluator():
    return TorchEvaluator(build(preset("tiny"), seed=0), max_batch=64)


def _both(board, evaluator, params, seed):
    return [
        search_position(board, evaluator, params, np.random.default_rng(seed), EvalCache(500), search_type=t)
        for t in (GumbelSearch, TreeSearch)
    ]


def _assert_same(ref, fast):
    assert fast.moves == ref.moves
    np.testing.assert_array_equal(fast.labels, ref.labels)
    assert fast.choice == ref.choice
    np.testing.assert_allclose(fast.policy, ref.policy, rtol=1e-9, atol=1e-12)
    assert fast.value == pytest.approx(ref.value, rel=1e-9)


@pytest.mark.parametrize(("sims", "considered"), [(8, 4), (32, 16)])
def test_fast_search_agrees_with_reference(evaluator, positions, sims, considered):
    params = GumbelParams(sims=sims, considered=considered, max_moves=200)
    searched = 0
    for i, board in enumerate(positions[:16]):
        if board.is_game_over():
            continue
        sfen = board.sfen()
        ref, fast = _both(board, evaluator, params, seed=i)
        _assert_same(ref, fast)
        assert board.sfen() == sfen  # both leave the board as it was
        searched += 1
    assert searched >= 12


@pytest.mark.parametrize(
    "targets",
    [
        {"c_scale": 0.1},
        {"rescale": False},
        {"policy_target": "visits", "value_target": "policy"},
        {"c_scale": 0.1, "value_target": "chosen"},
    ],
)
def test_fast_search_agrees_with_reference_for_every_target_setting(evaluator, positions, targets):
    """The target settings change the search (sigma in every choice) and what it returns; both
    searches must still agree move for move and target for target."""
    params = GumbelParams(sims=32, considered=16, max_moves=200, **targets)
    for i, board in enumerate(positions[:6]):
        if not board.is_game_over():
            _assert_same(*_both(board, evaluator, params, seed=i))


def test_value_targets_from_one_search(evaluator, positions):
    """The three values come from the same search (the settings leave the moves alone): the chosen
    move's Q is at least the mean over every simulation's root action when it is the most visited,
    and the improved policy's expectation lies between the smallest and largest completed Q."""
    board = next(b for b in positions[4:] if not b.is_game_over())
    results = {
        kind: search_position(board, evaluator, GumbelParams(sims=64, value_target=kind, root_lines=True),
                              np.random.default_rng(3), EvalCache(500), search_type=TreeSearch)
        for kind in ("mean", "policy", "chosen")
    }  # fmt: skip
    mean, policy, chosen = (results[k] for k in ("mean", "policy", "chosen"))
    assert mean.choice == policy.choice == chosen.choice
    np.testing.assert_array_equal(mean.policy, chosen.policy)
    assert chosen.value == pytest.approx(chosen.q[chosen.choice])
    visited = chosen.q[chosen.visits > 0]
    assert visited.min() - 1e-9 <= policy.value <= visited.max() + 1e-9
    assert len({round(r.value, 9) for r in results.values()}) == 3


def test_visit_count_targets_are_the_root_visits(evaluator, positions):
    board = next(b for b in positions[2:] if not b.is_game_over())
    params = GumbelParams(sims=32, policy_target="visits", root_lines=True)
    r = search_position(
        board, evaluator, params, np.random.default_rng(0), EvalCache(500), search_type=TreeSearch
    )
    np.testing.assert_allclose(r.policy, r.visits / r.visits.sum())
    assert r.visits.sum() == 32


def test_agrees_with_flat_priors_and_exact_leaves():
    """Flat logits make every comparison a tie (first index wins in both); a mate in one and the
    move limit give exact leaves."""
    ev = UniformEvaluator(64)
    boards = [cshogi.Board(), cshogi.Board("4k4/9/4P4/9/9/9/9/9/4K4 b G2r2b3g4s4n4l17p 1")]
    for board in boards:
        for max_moves in (None, board.move_number + 1):
            params = GumbelParams(sims=32, considered=16, max_moves=max_moves, draw_value=0.3)
            _assert_same(*_both(board, ev, params, seed=5))


def test_leaf_mate_probe_puts_the_policy_target_on_a_mate_in_three():
    """With flat priors and one visit per move every move looks alike to a mate-in-one probe; a
    3-ply probe proves the two rook drops that mate, and both searches' targets move onto them."""
    ev = UniformEvaluator(64)
    board = cshogi.Board("8k/9/7L1/7s1/9/9/9/9/4K4 b R 1")
    n = len(list(board.legal_moves))
    for plies, mass in ((1, 2 / n), (3, 1.0)):
        params = GumbelParams(sims=n, considered=n, c_scale=1.0, noise=False, leaf_mate_plies=plies)
        ref, fast = _both(board, ev, params, seed=1)
        _assert_same(ref, fast)
        mating = [i for i, m in enumerate(fast.moves) if cshogi.move_to_usi(m) in ("R*1d", "R*2a")]
        assert fast.policy[mating].sum() == pytest.approx(mass, abs=1e-6)


def test_edge_arrays_grow_for_positions_with_many_moves(evaluator):
    """A position with hundreds of legal moves (drops) outgrows the initial 128 edges a node."""
    board = cshogi.Board("8k/9/9/9/9/9/9/9/K8 b RBGSNLP2r2b3g3s3n3l17p 1")
    assert len(list(board.legal_moves)) > 2 * 128
    _assert_same(*_both(board, evaluator, GumbelParams(sims=4, considered=2), seed=1))


def test_selfplay_writes_the_same_games_as_the_reference(evaluator, tmp_path, monkeypatch):
    def games(out):
        config = SelfPlayConfig(
            out_dir=out, games=6, parallel=3, sims=16, considered=8, max_moves=30, random_plies=4, seed=7,
            progress=False,
        )  # fmt: skip
        run_selfplay(config, evaluator)
        (path,) = out.glob("*.hcpe3")
        return list(iter_hcpe3_games(path))

    fast = games(tmp_path / "fast")
    monkeypatch.setattr(engine.selfplay.runner, "SearchGroup", ReferenceGroup)
    ref = games(tmp_path / "ref")
    assert len(fast) == len(ref) == 6
    for f, r in zip(fast, ref, strict=True):
        assert f.result == r.result
        np.testing.assert_array_equal(f.moves, r.moves)
        for cf, cr in zip(f.candidates, r.candidates, strict=True):
            np.testing.assert_array_equal(cf["move16"], cr["move16"])
            assert np.abs(cf["visitNum"].astype(int) - cr["visitNum"].astype(int)).max() <= 1


def test_terminal_and_moves_generates_the_legal_moves_once_and_agrees_with_cshogi():
    """The search's leaf check: the same verdict as the rules, game over exactly when cshogi has no
    legal move, and the legal moves (in cshogi's order) whenever play goes on."""
    from engine.core.rules import terminal, terminal_and_moves

    rng = np.random.default_rng(5)
    seen_end = 0
    for _ in range(40):
        board = cshogi.Board()
        for _ in range(300):
            end, legal = terminal_and_moves(board, 200)
            assert end == terminal(board, 200)
            if end is None:
                assert not board.is_game_over()
                assert list(legal) == list(board.legal_moves)
            else:
                assert legal is None
                seen_end += 1
                if end.reason == 0:
                    assert board.is_game_over() and not board.is_nyugyoku()
                break
            moves = list(board.legal_moves)
            board.push(moves[rng.integers(len(moves))])
    assert seen_end > 0


def test_uniform_evaluator_answers_without_reading_rows():
    ev = UniformEvaluator(4)
    x1, x2 = np.ones((9, *ev.x1.shape[1:]), np.float32), np.ones((9, *ev.x2.shape[1:]), np.float32)
    policy, value = ev.evaluate_features(x1, x2)
    assert policy.shape == (9, ev._policy.shape[1]) and not policy.any() and (value == 0.5).all()
    assert not policy.flags.writeable  # a shared constant: callers cannot change the next answer
