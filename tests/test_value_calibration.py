"""The value-confidence entry's driver (docs/experiments/2026-12-03-value-confidence/value_calibration.py):
the logistic scale fit that says whether a teacher's scores and a network's value are on the scale
training and search read them on."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
DRIVER = REPO / "docs" / "experiments" / "2026-12-03-value-confidence" / "value_calibration.py"


@pytest.fixture(scope="module")
def calib():
    spec = importlib.util.spec_from_file_location("value_calibration", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("true_scale", [300.0, 756.0, 2500.0])
def test_best_scale_recovers_the_scale_results_were_drawn_with(calib, true_scale):
    rng = np.random.default_rng(7)
    x = rng.normal(0.0, 1000.0, 40_000)
    y = (rng.random(x.size) < 1.0 / (1.0 + np.exp(-x / true_scale))).astype(np.float64)
    fit = calib.best_scale(x, y, 50.0, 20000.0)
    assert fit == pytest.approx(true_scale, rel=0.08)
    assert calib.logistic_nll(x, y, fit) <= calib.logistic_nll(x, y, true_scale)


def test_draws_count_as_half_and_the_loss_is_the_cross_entropy(calib):
    x = np.array([0.0, 756.0, -756.0])
    y = np.array([0.5, 1.0, 0.0])
    p = 1.0 / (1.0 + np.exp(-x / 756.0))
    expected = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    assert calib.logistic_nll(x, y, 756.0) == pytest.approx(expected)


def test_a_real_engines_scores_predict_its_results_from_the_movers_side(calib):
    """Fairy-Stockfish's own games (the committed held-out set): its score for the side to move and that
    side's result agree in sign on most rows, and on the fitted scale the scores predict the results
    better than no score at all (loss log 2). Reading a result from the wrong side would invert both."""
    from train.data.readers import read_hcpe

    rows = read_hcpe(REPO / "models" / "heldout" / "fsf-200k.hcpe")
    _, y = calib.boards_and_results(rows)
    ev = rows["eval"].astype(np.float64)
    decided = (np.abs(ev) < calib.MATE_EVAL) & (ev != 0) & (y != 0.5)
    assert np.mean((ev[decided] > 0) == (y[decided] > 0.5)) > 0.6
    fit = calib.best_scale(ev[decided], y[decided], 50.0, 20000.0)
    assert calib.logistic_nll(ev[decided], y[decided], fit) < np.log(2.0) - 0.01
