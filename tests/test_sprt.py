"""The sequential test bin/match stops on, and the pentanomial error bar: against values worked out by
hand and against simulated matches of known strength."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.match.arbiter import run_match
from engine.match.elo import expected_score, pair_error95, score_to_elo
from engine.match.sprt import GAME_SCORES, PAIR_SCORES, Sprt, outcome_counts, pair_scores
from engine.usi_client import EngineSpec, GoLimit
from tests.test_match import GREEDY, REPO, RUN, fake_engine


def normal_llr(scores: list[float], mu0: float, mu1: float) -> float:
    """The log-likelihood ratio of two normal models with the sample's own variance, from the densities."""
    n = len(scores)
    mean = sum(scores) / n
    var = sum((x - mean) ** 2 for x in scores) / n

    def log_density(x: float, mu: float) -> float:
        return -0.5 * math.log(2 * math.pi * var) - (x - mu) ** 2 / (2 * var)

    return sum(log_density(x, mu1) - log_density(x, mu0) for x in scores)


def test_bounds_are_walds():
    t = Sprt(0, 50)
    assert t.lower == pytest.approx(math.log(0.05 / 0.95)) == pytest.approx(-2.944, abs=1e-3)
    assert t.upper == pytest.approx(2.944, abs=1e-3)
    assert Sprt(0, 50, alpha=0.01, beta=0.1).upper == pytest.approx(math.log(0.9 / 0.01))
    assert t.decision(3.0) == "H1" and t.decision(-3.0) == "H0" and t.decision(0.5) is None


def test_llr_is_the_normal_models_likelihood_ratio():
    """Many pairs: the prior no longer matters and the LLR is the exact normal-model ratio."""
    rng = random.Random(1)
    scores = [rng.choice(PAIR_SCORES) for _ in range(4000)]
    t = Sprt(-20, 30)
    expected = normal_llr(scores, expected_score(-20), expected_score(30))
    assert t.llr(outcome_counts(scores, PAIR_SCORES), PAIR_SCORES) == pytest.approx(expected, rel=2e-3)


@given(st.lists(st.integers(0, 30), min_size=5, max_size=5), st.floats(-200, 200), st.floats(1, 200))
def test_llr_changes_sign_with_the_engines_swapped(counts, elo0, width):
    """Engine 2's view: each pair score x becomes 1 - x (the tally reversed), the hypotheses -elo1 < -elo0."""
    t = Sprt(elo0, elo0 + width)
    swapped = Sprt(-(elo0 + width), -elo0)
    assert swapped.llr(counts[::-1], PAIR_SCORES) == pytest.approx(-t.llr(counts, PAIR_SCORES), abs=1e-9)


def test_a_few_equal_results_do_not_decide_alone():
    t = Sprt(0, 50)
    assert t.llr([0, 0, 0, 0, 0], PAIR_SCORES) == 0.0
    assert t.decision(t.llr([0, 0, 1, 0, 0], PAIR_SCORES)) is None  # one even pair says nothing
    assert t.decision(t.llr([3, 0, 0, 0, 0], PAIR_SCORES)) is None  # nor do six straight losses
    losses = t.llr([20, 0, 0, 0, 0], PAIR_SCORES)
    assert math.isfinite(losses) and t.decision(losses) == "H0"
    assert t.decision(t.llr([0, 0, 0, 0, 20], PAIR_SCORES)) == "H1"
    assert t.decision(t.llr([0, 0, 20], GAME_SCORES)) == "H1"


def simulate(t: Sprt, true_elo: float, rng: random.Random, paired: bool) -> tuple[str, int]:
    """One sequential match between engines `true_elo` apart (independent decisive games): the
    decision and the games it took."""
    p = expected_score(true_elo)
    support = PAIR_SCORES if paired else GAME_SCORES
    counts = [0] * len(support)
    games = 0
    while (decision := t.decision(t.llr(counts, support))) is None:
        a, b = rng.random() < p, rng.random() < p
        games += 2
        if paired:
            counts[2 * (a + b)] += 1
        else:
            counts[2 * a] += 1
            counts[2 * b] += 1
    return decision, games


@pytest.mark.parametrize("paired", [True, False])
def test_simulated_matches_keep_the_error_rates(paired):
    """Engines exactly elo0 apart are passed (H1) at most about alpha of the time, exactly elo1 apart
    failed at most about beta; engines far apart are told apart in a few dozen games."""
    t = Sprt(0, 50)
    rng = random.Random(3)
    runs = 300
    at_elo0 = [simulate(t, 0, rng, paired)[0] for _ in range(runs)]
    at_elo1 = [simulate(t, 50, rng, paired)[0] for _ in range(runs)]
    # 5 % nominal; 0.09 is 3 standard deviations of 300 runs above it
    assert at_elo0.count("H1") / runs < 0.09 and at_elo1.count("H0") / runs < 0.09
    strong = [simulate(t, 250, rng, paired) for _ in range(50)]
    weak = [simulate(t, -200, rng, paired) for _ in range(50)]
    assert all(d == "H1" for d, _ in strong) and all(d == "H0" for d, _ in weak)
    assert sum(n for _, n in strong + weak) / 100 < 40


def test_sprt_rejects_bad_hypotheses():
    with pytest.raises(ValueError, match="elo0 < elo1"):
        Sprt(50, 0)
    with pytest.raises(ValueError, match="error rates"):
        Sprt(0, 50, alpha=0.0)


def test_pairs_and_their_error_bar():
    assert pair_scores({0: 1.0, 1: 0.0, 2: 1.0, 3: 1.0, 4: 0.5}) == [0.5, 1.0]  # game 4's pair is unfinished
    assert pair_scores({3: 1.0, 0: 0.0, 2: 0.5}) == [0.75]  # games end out of order when played at once
    assert outcome_counts([0.0, 0.5, 0.5, 1.0], PAIR_SCORES) == [1, 0, 2, 0, 1]
    assert outcome_counts([1.0, 0.5], GAME_SCORES) == [0, 1, 1]
    # pairs 0.5, 0.5, 1, 0.5: mean 0.625, variance (3 * 0.125^2 + 0.375^2) / 4 = 0.046875,
    # se sqrt(0.046875 / 4) = 0.10825, slope 400 / (ln 10 * 0.625 * 0.375) = 741.19: 1.95996 * se * slope
    assert pair_error95([0.5, 0.5, 1.0, 0.5]) == pytest.approx(157.26, abs=0.01)
    assert pair_error95([0.5]) == math.inf
    # every opening won by whoever had its better side: the games say nothing about the engines, and
    # the pairs show it (score 0.5, no spread) where the same games counted one by one would not
    assert pair_error95([0.5] * 10) == 0.0 and score_to_elo(0.5) == 0.0


def test_match_stops_once_the_test_decides(tmp_path):
    resigner = fake_engine(tmp_path, "resigner", '"resign"')
    limits = (GoLimit(nodes=1), GoLimit(nodes=1))
    specs = [EngineSpec(resigner), EngineSpec(GREEDY)]
    result = run_match(specs, 200, limits, progress=False, sprt=Sprt(0, 50))
    assert result.decision == "H0" and result.llr <= Sprt(0, 50).lower
    assert len(result.games) % 2 == 0 and 4 <= len(result.games) < 20  # stopped after a finished pair
    summary = result.summary()
    assert summary["sprt"]["decision"] == "H0"
    assert summary["pentanomial"] == [len(result.games) // 2, 0, 0, 0, 0]
    assert "SPRT elo0 0 elo1 50" in str(result) and "H0 accepted" in str(result)
    at_once = run_match(specs, 200, limits, progress=False, sprt=Sprt(0, 50), concurrency=3)
    assert at_once.decision == "H0" and len(at_once.games) < 24  # the decision, then the games in play
    undecided = run_match(specs, 2, limits, progress=False, sprt=Sprt(0, 50))
    assert len(undecided.games) == 2 and undecided.decision is None and "no decision" in str(undecided)


def test_match_cli_sprt(tmp_path):
    resigner = fake_engine(tmp_path, "resigner", '"resign"')
    cmd = [sys.executable, str(REPO / "bin" / "match"), GREEDY, resigner, "--nodes", "1", "--no-progress"]
    out = subprocess.run([*cmd, "--games", "100", "--sprt", "0", "50", "--csa", str(tmp_path / "csa")], **RUN)
    assert out.returncode == 0, out.stderr
    assert "H1 accepted" in out.stdout and '"decision": "H1"' in out.stdout
    played = len(list((tmp_path / "csa").glob("*.csa")))
    assert 4 <= played < 20 and f"after {played} games" in out.stdout
    for extra, message in (
        (["--sprt", "50", "0"], "match: error: --sprt: SPRT needs elo0 < elo1"),
        (["--sprt", "0", "50", "--sprt-alpha", "0.7"], "match: error: --sprt: SPRT error rates"),
    ):
        bad = subprocess.run([*cmd, *extra], **RUN)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
