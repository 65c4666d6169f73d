"""Elo estimates against values worked out by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.match.elo import clamp_score, elo_estimate, likelihood_of_superiority, score_to_elo


def test_even_score_is_zero_elo():
    e = elo_estimate(3, 3, 4)
    assert e.score == 0.5 and e.elo == pytest.approx(0.0, abs=1e-12)
    assert e.los == pytest.approx(0.5)
    # per-game variance: (3 * 0.25 + 3 * 0.25 + 0) / 10 = 0.15; se = sqrt(0.015); slope 400 / (ln10 / 4)
    assert e.error95 == pytest.approx(1.959964 * math.sqrt(0.015) * 1600 / math.log(10), rel=1e-6)


def test_six_two_two():
    # p = 0.7: elo = 400 log10(7/3) = 147.19; variance (6*.09 + 2*.04 + 2*.49)/10 = 0.16, se = sqrt(.016),
    # slope = 400 / (ln10 * 0.21) -> 95% half-width 205.08; LOS = (1 + erf(4 / sqrt(16))) / 2 = 0.92135
    e = elo_estimate(6, 2, 2)
    assert e.games == 10 and e.score == pytest.approx(0.7)
    assert e.elo == pytest.approx(147.1907, abs=1e-3)
    assert e.error95 == pytest.approx(205.0846, abs=1e-3)
    assert e.los == pytest.approx(0.921350, abs=1e-6)


def test_perfect_score_is_finite_and_symmetric():
    # 4 wins: p clamped to 1 - 1/(2*5) = 0.9 -> 400 log10(9) = 381.70; variance 4 * 0.01 / 4 = 0.01
    e = elo_estimate(4, 0, 0)
    assert e.score == 1.0
    assert e.elo == pytest.approx(381.697, abs=1e-3)
    assert e.error95 == pytest.approx(1.959964 * math.sqrt(0.01 / 4) * 400 / (math.log(10) * 0.09), rel=1e-6)
    mirrored = elo_estimate(0, 4, 0)
    assert mirrored.elo == pytest.approx(-e.elo) and mirrored.error95 == pytest.approx(e.error95)
    assert mirrored.los == pytest.approx(1 - e.los)


def test_no_games_and_bad_counts():
    e = elo_estimate(0, 0, 0)
    assert e.elo == 0.0 and math.isinf(e.error95) and e.los == 0.5
    with pytest.raises(ValueError):
        elo_estimate(-1, 0, 0)


def test_more_games_narrow_the_error_bar():
    assert elo_estimate(60, 20, 20).error95 < elo_estimate(6, 2, 2).error95 / 3


def test_los_draws_carry_no_information():
    assert likelihood_of_superiority(5, 5) == 0.5
    assert likelihood_of_superiority(0, 0) == 0.5
    assert likelihood_of_superiority(10, 2) > 0.98


def test_score_to_elo_known_values():
    assert score_to_elo(10 / 11) == pytest.approx(400.0)  # 10:1 odds is 400 Elo
    assert score_to_elo(0.75) == pytest.approx(190.8485, abs=1e-4)  # 400 log10(3)
    assert math.copysign(1.0, score_to_elo(0.5)) == 1.0  # an even score prints as 0, not -0


@given(st.floats(0.01, 0.99))
def test_score_to_elo_inverts_the_expected_score(p):
    elo = score_to_elo(p)
    assert 1.0 / (1.0 + 10.0 ** (-elo / 400.0)) == pytest.approx(p, rel=1e-9)  # the Elo expected score
    assert score_to_elo(1.0 - p) == pytest.approx(-elo, abs=1e-9)


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50))
def test_clamped_and_antisymmetric(w, l, d):
    e, f = elo_estimate(w, l, d), elo_estimate(l, w, d)
    assert math.isfinite(e.elo)
    assert e.elo == pytest.approx(-f.elo, abs=1e-9)
    n = w + l + d
    if n:
        assert 0 < clamp_score(e.score, n) < 1
        assert (e.elo > 0) == (w > l) or w == l
