"""Gumbel AlphaZero math against DESIGN.md's table and hand-computed values."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.search import gumbel


@pytest.mark.parametrize(
    ("m", "n", "phases"),
    [
        (16, 16, [(16, 1)]),
        (16, 32, [(16, 1), (8, 1), (4, 2)]),
        (16, 64, [(16, 1), (8, 2), (4, 4), (2, 8)]),
        (1, 5, [(1, 5)]),
        (2, 8, [(2, 4)]),
        (3, 12, [(3, 2), (2, 3)]),
        (16, 4, [(16, 1)]),
        (4, 3, [(4, 1)]),
    ],
)
def test_halving_schedule_matches_table(m, n, phases):
    assert gumbel.halving_schedule(m, n) == phases


def test_considered_visits_sequence():
    assert gumbel.considered_visits(16, 32) == [0] * 16 + [1] * 8 + [2] * 4 + [3] * 4
    assert gumbel.considered_visits(1, 4) == [0, 1, 2, 3]
    assert gumbel.considered_visits(16, 4) == [0, 0, 0, 0]
    assert gumbel.considered_visits(16, 0) == []


@given(st.integers(1, 40), st.integers(0, 300))
def test_schedule_spends_exactly_the_budget(m, n):
    seq = gumbel.considered_visits(m, n)
    assert len(seq) == n
    phases = gumbel.halving_schedule(m, n)
    assert sum(k * v for k, v in phases) >= n
    sizes = [k for k, _ in phases]
    assert all(k == max(2, prev // 2) for prev, k in zip(sizes, sizes[1:], strict=False))
    if m > 1 and n:
        log2m = math.ceil(math.log2(m))
        assert phases[0] == (m, max(1, n // (log2m * m)))


def test_sigma_and_rescale():
    np.testing.assert_allclose(gumbel.sigma(np.array([0.0, 0.5, 1.0]), 4, c_scale=1.0), [0.0, 27.0, 54.0])
    np.testing.assert_allclose(gumbel.sigma(np.array([1.0]), 0, c_visit=10, c_scale=0.1), [1.0])
    np.testing.assert_allclose(gumbel.rescale_q(np.array([0.2, 0.6, 0.4])), [0.0, 1.0, 0.5])
    np.testing.assert_array_equal(gumbel.rescale_q(np.array([0.3, 0.3])), [0.0, 0.0])


def test_completed_q_hand_computed():
    q = np.array([0.6, 0.2, 0.0, 0.0])
    visits = np.array([2, 1, 0, 0])
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    v_mix = (0.5 + 3 * (0.4 * 0.6 + 0.3 * 0.2) / 0.7) / 4  # = 0.446428...
    cq = gumbel.completed_q(q, visits, probs, 0.5)
    np.testing.assert_allclose(cq, [0.6, 0.2, v_mix, v_mix])
    assert abs(v_mix - 0.4464285714) < 1e-9
    # nothing visited: every action completes to the network value
    np.testing.assert_allclose(gumbel.completed_q(q * 0, visits * 0, probs, 0.3), [0.3] * 4)


def test_improved_policy_hand_computed():
    logits = np.array([0.0, 1.0, 0.0, -1.0])
    q_hat = np.array([1.0, 0.0, 0.5, 0.5])
    p = gumbel.improved_policy(logits, q_hat, max_visits=2, c_visit=50, c_scale=0.02)
    z = logits + (50 + 2) * 0.02 * q_hat  # [1.04, 1, 0.52, -0.48]
    expect = np.exp(z) / np.exp(z).sum()
    np.testing.assert_allclose(p, expect)
    assert abs(p.sum() - 1) < 1e-12


def test_select_root_respects_target_and_considered():
    g = np.zeros(4)
    logits = np.array([1.0, 2.0, 3.0, 0.0])
    sig = np.zeros(4)
    all_ = np.ones(4, bool)
    assert gumbel.select_root(g, logits, sig, np.array([1, 1, 0, 0]), all_, 1) == 1
    assert gumbel.select_root(g, logits, sig, np.array([1, 1, 0, 0]), all_, 0) == 2
    assert gumbel.select_root(g, logits, sig, np.array([1, 1, 0, 0]), np.array([1, 1, 0, 1], bool), 0) == 3
    # sigma(q_hat) can overturn the prior
    assert gumbel.select_root(g, logits, np.array([0, 5.0, 0, 0]), np.array([1, 1, 0, 0]), all_, 1) == 1
    assert gumbel.select_root(g, logits, np.array([5.0, 0, 0, 0]), np.array([1, 1, 0, 0]), all_, 1) == 0
    with pytest.raises(ValueError):
        gumbel.select_root(g, logits, sig, np.array([1, 1, 0, 0]), all_, 3)


def test_select_interior_visit_penalty():
    logits = np.log(np.array([0.5, 0.3, 0.2]))
    # pi = prior (sigma 0): [0.5, 0.3, 0.2] - [3, 0, 0] / 4 -> action 1
    assert gumbel.select_interior(logits, np.zeros(3), np.array([3, 0, 0])) == 1
    assert gumbel.select_interior(logits, np.zeros(3), np.array([0, 0, 0])) == 0
    # a large sigma on action 2 wins despite its lower prior
    assert gumbel.select_interior(logits, np.array([0.0, 0.0, 10.0]), np.array([1, 1, 1])) == 2


def test_final_move_among_most_visited():
    g = np.array([0.0, 1.0, 0.0, 0.0])
    logits = np.array([0.5, 0.0, 5.0, 9.0])
    visits = np.array([2, 2, 1, 0])
    considered = np.array([True, True, True, False])
    assert gumbel.final_move(g, logits, np.zeros(4), visits, considered) == 1
    assert gumbel.final_move(g, logits, np.array([1.0, 0, 0, 0]), visits, considered) == 0


def test_top_k_considered():
    mask = gumbel.top_k_considered(np.zeros(5), np.array([0.0, 3.0, 1.0, 2.0, -1.0]), 2)
    np.testing.assert_array_equal(mask, [False, True, False, True, False])
    assert gumbel.top_k_considered(np.zeros(3), np.zeros(3), 16).all()


def test_absolute_q_keeps_small_differences_small():
    """Min-max rescaling stretches any spread to [0, 1]; absolute Q leaves win probabilities as they are,
    so two moves 0.02 apart end 1.3 logits apart at c_scale 1 and 50 + 15 visits, not 65."""
    q = np.array([0.50, 0.52])
    np.testing.assert_allclose(gumbel.transform_q(q, rescale=True), [0.0, 1.0])
    np.testing.assert_allclose(gumbel.transform_q(q, rescale=False), q)
    gap = np.diff(gumbel.sigma(gumbel.transform_q(q, rescale=False), 15, 50.0, 1.0))
    assert gap[0] == pytest.approx(0.02 * 65)


def test_visit_policy():
    np.testing.assert_allclose(gumbel.visit_policy(np.array([0, 3, 1])), [0.0, 0.75, 0.25])


def test_root_values_hand_computed():
    """Three moves: a (4 visits, Q 0.7), b (1 visit, Q 0.2), c unvisited; the network said 0.5."""
    q = np.array([0.7, 0.2, 0.0])
    visits = np.array([4, 1, 0])
    probs = np.array([0.5, 0.3, 0.2])
    improved = np.array([0.8, 0.1, 0.1])
    args = (q, visits, probs, 0.5, improved, 0)
    # mean: (0.5 + 4 * 0.7 + 0.2) / 6, dragged down by b's visit and the network's value
    assert gumbel.root_value("mean", *args) == pytest.approx(3.5 / 6)
    # policy: c's completed Q is v_mix = (0.5 + 5 * (0.5 * 0.7 + 0.3 * 0.2) / 0.8) / 6
    v_mix = (0.5 + 5 * (0.35 + 0.06) / 0.8) / 6
    assert gumbel.root_value("policy", *args) == pytest.approx(0.8 * 0.7 + 0.1 * 0.2 + 0.1 * v_mix)
    assert gumbel.root_value("chosen", *args) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="value target"):
        gumbel.root_value("best", *args)
