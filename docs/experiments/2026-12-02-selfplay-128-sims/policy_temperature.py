#!/usr/bin/env python3
"""How well each model's policy predicts a held-out engine's moves at several softmax temperatures:
the cross-entropy over the legal moves of the engine's move, and the policy's entropy, with the logits
divided by T (T = 1, the network as trained, is the baseline in the same run; the engine's search
uses `Softmax_Temperature`, 1.74 by default).

Two models whose cross-entropy differs at T = 1 but not at their best T differ in how sharp their
policy is, not in how well they rank the moves.

    python docs/experiments/2026-12-02-selfplay-128-sims/policy_temperature.py MODEL [MODEL ...] \
        [--test models/heldout/fsf-200k.hcpe]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

import cshogi  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from engine.core.features import features_from_hcps  # noqa: E402
from engine.core.moves import labels_from_move16, legal_moves_and_labels  # noqa: E402
from engine.core.network import load_model  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
TEMPERATURES = (0.8, 1.0, 1.2, 1.5, 1.74, 2.0)


def legal_labels_and_targets(records: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Each position's legal move labels and the index among them of the recorded move."""
    board = cshogi.Board()
    legal, target = [], []
    for r in records:
        board.set_hcp(r["hcp"])
        _, labels = legal_moves_and_labels(board)
        move = labels_from_move16(np.array([r["bestMove16"]]), board.turn)[0]
        legal.append(labels)
        target.append(int(np.flatnonzero(labels == move)[0]))
    return legal, np.array(target)


def cross_entropy_and_entropy(
    logits: np.ndarray, legal: list[np.ndarray], target: np.ndarray, temperature: float
) -> tuple[float, float]:
    """Means over positions of -log p(recorded move) and of the entropy (softmax over the legal moves)."""
    ce, ent = [], []
    for row, labels, t in zip(logits, legal, target, strict=True):
        z = row[labels] / temperature
        logp = z - z.max()
        logp -= np.log(np.exp(logp).sum())
        ce.append(-logp[t])
        ent.append(-(np.exp(logp) * logp).sum())
    return float(np.mean(ce)), float(np.mean(ent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--test", default=str(REPO / "models" / "heldout" / "fsf-200k.hcpe"), help="an hcpe file")
    a = ap.parse_args()
    records = np.fromfile(a.test, cshogi.HuffmanCodedPosAndEval)
    x1, x2 = features_from_hcps(records["hcp"])
    legal, target = legal_labels_and_targets(records)
    print(f"{a.test}: {len(records)} positions; cross-entropy / entropy over the legal moves, logits / T")
    print("model".ljust(40) + "".join(f"T={t}".rjust(16) for t in TEMPERATURES))
    for path in a.models:
        net = load_model(path).eval()
        with torch.no_grad():
            policy = net(torch.from_numpy(x1).float(), torch.from_numpy(x2).float())[0]
        logits = policy.reshape(len(records), -1).numpy()
        cells = [cross_entropy_and_entropy(logits, legal, target, t) for t in TEMPERATURES]
        name = "/".join(Path(path).parts[-2:])  # runs/X/model.pt is told apart by its folder
        print(name[-39:].ljust(40) + "".join(f"{ce:.3f} / {h:.3f}".rjust(16) for ce, h in cells))


if __name__ == "__main__":
    main()
