"""dlshogi's evaluation scale: win probability <-> centipawn-like score (Eval_Coef 756)."""

from __future__ import annotations

import math

import numpy as np

EVAL_COEF = 756.0


def value_to_eval(v: float) -> int:
    """Score for a win probability, `-756 * ln(1/v - 1)`, clamped away from +-infinity."""
    v = min(max(float(v), 1e-7), 1 - 1e-7)
    return int(round(-EVAL_COEF * math.log(1 / v - 1)))


def eval_to_value(e: np.ndarray | float) -> np.ndarray | float:
    """Win probability for scores (scalar or array): the logistic inverse of value_to_eval."""
    if np.ndim(e) == 0:
        x = -float(e) / EVAL_COEF
        return 0.0 if x > 700 else 1.0 / (1.0 + math.exp(x))  # engines' mate scores (cp 1000000) overflow exp
    return 1.0 / (1.0 + np.exp(-np.asarray(e, np.float64) / EVAL_COEF))
