#!/usr/bin/env python3
"""How well scores and the value head predict game results, on hcpe records: a check of the value
target's scale (val_lambda mixes the eval, read as win probability sigmoid(eval / 756), with the
result) and of the network's confidence.

For each file it prints, against the result of each row's game from the mover's view:
- the records' eval: the coefficient C that fits sigmoid(eval / C) best, next to dlshogi's 756 (the
  baseline): a C far from 756 means the teacher's scores, read on dlshogi's scale, over- or
  under-state the winning chances in these games;
- with --model: the temperature T that fits sigmoid(logit / T) best for the network's value, next to
  T = 1 (the network as it is): T > 1 means the network is more confident than its results allow.

  docs/experiments/2026-12-03-value-confidence/value_calibration.py --model models/default.pt \
      models/heldout/fsf-200k.hcpe corpus.hcpe
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

import cshogi  # noqa: E402
import numpy as np  # noqa: E402

from engine.backends.choose import create_evaluator  # noqa: E402
from engine.backends.evaluator import Evaluator  # noqa: E402
from engine.core.score import EVAL_COEF  # noqa: E402
from engine.errors import cli_main  # noqa: E402
from train.data.readers import read_hcpe  # noqa: E402

BATCH = 256
MATE_EVAL = 3000  # rows scored beyond this (mates, resignations) say nothing about the scale


def logistic_nll(x: np.ndarray, y: np.ndarray, scale: float) -> float:
    """Mean cross-entropy of results y (1, 0.5, 0) under the prediction sigmoid(x / scale)."""
    z = x / scale
    return float(np.mean(np.logaddexp(0.0, -z) + (1.0 - y) * z))


def best_scale(x: np.ndarray, y: np.ndarray, lo: float, hi: float) -> float:
    """The scale in [lo, hi] with the least logistic_nll: golden-section search on its logarithm
    (the loss is unimodal in the scale)."""
    a, b = np.log(lo), np.log(hi)
    g = (np.sqrt(5.0) - 1.0) / 2.0
    for _ in range(60):
        c, d = b - g * (b - a), a + g * (b - a)
        if logistic_nll(x, y, np.exp(c)) < logistic_nll(x, y, np.exp(d)):
            b = d
        else:
            a = c
    return float(np.exp((a + b) / 2.0))


def boards_and_results(rows: np.ndarray) -> tuple[list[cshogi.Board], np.ndarray]:
    """Each row's position and its game's result for the side to move (1 win, 0.5 draw, 0 loss)."""
    boards, results = [], np.empty(len(rows))
    for i, row in enumerate(rows):
        board = cshogi.Board()
        board.set_hcp(row["hcp"])
        boards.append(board)
        winner = int(row["gameResult"])  # 1 Black won, 2 White won, 0 draw
        results[i] = 0.5 if winner == 0 else float((winner == 1) == (board.turn == cshogi.BLACK))
    return boards, results


def value_logits(ev: Evaluator, boards: list[cshogi.Board]) -> np.ndarray:
    """The network's value for each position, as a logit."""
    values = [ev.evaluate_boards(boards[s : s + BATCH])[1][: len(boards[s : s + BATCH])]
              for s in range(0, len(boards), BATCH)]  # fmt: skip
    v = np.clip(np.concatenate(values).astype(np.float64).reshape(-1), 1e-7, 1 - 1e-7)
    return np.log(v / (1.0 - v))


def report(path: str, ev: Evaluator | None) -> list[str]:
    """The figures for one file; with an evaluator, of its network's value too."""
    rows = read_hcpe(path)
    boards, y = boards_and_results(rows)
    scores = rows["eval"].astype(np.float64)
    scored = np.abs(scores) < MATE_EVAL
    x, xy = scores[scored], y[scored]
    coef = best_scale(x, xy, 50.0, 20000.0)
    lines = [
        f"{path}: {len(rows)} positions ({int(scored.sum())} scored under {MATE_EVAL})",
        f"  eval coefficient: best {coef:.0f} (loss {logistic_nll(x, xy, coef):.4f}) against "
        f"dlshogi's {EVAL_COEF:.0f} (loss {logistic_nll(x, xy, EVAL_COEF):.4f})",
    ]
    if ev is not None:
        logit = value_logits(ev, boards)
        t = best_scale(logit, y, 0.05, 20.0)
        lines.append(
            f"  value temperature: best {t:.2f} (loss {logistic_nll(logit, y, t):.4f}) against 1 "
            f"(loss {logistic_nll(logit, y, 1.0):.4f}); accuracy {np.mean((logit > 0) == (y > 0.5)):.3f}"
        )
    return lines


@cli_main("value_calibration.py")
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("records", nargs="+", help="hcpe files")
    p.add_argument("--model", help="also check this network's value (.pt / .onnx; 'default' = shipped)")
    a = p.parse_args(argv)
    ev = None
    if a.model is not None:  # in float, not the engine's int8: the network's own value
        ev = create_evaluator(None if a.model == "default" else a.model, max_batch=BATCH, log=lambda _: None)
    try:
        for path in a.records:
            print("\n".join(report(path, ev)), flush=True)
    finally:
        if ev is not None:
            ev.close()


if __name__ == "__main__":
    sys.exit(main())
