#!/usr/bin/env python3
"""The int8 CPU model against its fp32 ONNX (the baseline, in the same run): positions/s at a few batch
sizes, PUCT playouts/s from a middle-game position, and how closely it agrees on positions the network
reaches in its own games (another seed than the calibration games): the top-1 move among the legal
moves, the KL divergence of the move probabilities and the mean absolute difference of the win
probability.

    python bench/int8.py [--model M] [--seconds S]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cshogi  # noqa: E402
import numpy as np  # noqa: E402

from bench.inference import positions_per_second  # noqa: E402
from engine.backends.choose import create_evaluator  # noqa: E402
from engine.backends.int8 import own_games  # noqa: E402
from engine.core.moves import legal_moves_and_labels  # noqa: E402
from engine.search import gumbel  # noqa: E402
from engine.search.control import SearchControl  # noqa: E402
from engine.search.puct import PuctParams  # noqa: E402
from engine.search.puct_tree import FastSearch  # noqa: E402

MIDDLE_GAME = "ln3g1nl/1g4sk1/p1p1Pp1pp/1p2p4/3ps4/+B1P6/PPSP1PPPP/3KG4/LN3GSNL b Rrbp 51"


def agreement(fp32, int8, sfens: list[str], x1: np.ndarray, x2: np.ndarray) -> dict[str, float]:
    p32, v32 = fp32.evaluate_features(x1, x2)
    p8, v8 = int8.evaluate_features(x1, x2)
    top1, kl = [], []
    for i, sfen in enumerate(sfens):
        _, labels = legal_moves_and_labels(cshogi.Board(sfen))
        a = gumbel.softmax(p32[i][labels].astype(np.float64))
        b = gumbel.softmax(p8[i][labels].astype(np.float64))
        top1.append(a.argmax() == b.argmax())
        kl.append(float((a * (np.log(a + 1e-12) - np.log(b + 1e-12))).sum()))
    return {
        "top1": float(np.mean(top1)),
        "kl": float(np.mean(kl)),
        "value_mae": float(np.abs(v32 - v8).mean()),
    }


def playouts_per_second(ev, seconds: float, batch: int = 32) -> float:
    search = FastSearch(ev, PuctParams(leaf_mate_plies=5), batch_size=batch)
    search.set_position(MIDDLE_GAME, [])
    search.evaluate_root()
    control = SearchControl()
    control.target = control.hard = control.start + seconds
    r = search.run(control)
    return r.playouts / r.elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model file (default: the shipped model)")
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        quiet = {"log": lambda m: None, "engine_dir": cache, "backend": "onnx", "max_batch": 64}
        fp32 = create_evaluator(a.model, **quiet)
        rows = list(own_games(fp32, games=32, plies=64, seed=1))
        sfens = [s for r in rows for s in r[0]]
        x1, x2 = np.concatenate([r[1] for r in rows]), np.concatenate([r[2] for r in rows])
        int8 = create_evaluator(a.model, int8=True, **quiet)
        agree = agreement(fp32, int8, sfens, x1, x2)
        fp32.close()
        int8.close()
        header = "".join(f"{f'batch {b} pos/s':>18}" for b in (8, 32, 64))
        print(f"{'model':<16}{header}{'playouts/s':>14}")
        for name, quantized in (("fp32 (baseline)", False), ("int8", True)):
            # one session at a time: an idle onnxruntime session's spinning threads would slow the other
            ev = create_evaluator(a.model, int8=quantized, **quiet)
            rates = [positions_per_second(ev, x1, x2, b, a.seconds) for b in (8, 32, 64)]
            nps = playouts_per_second(ev, a.seconds)
            print(f"{name:<16}" + "".join(f"{r:>18,.0f}" for r in rates) + f"{nps:>14,.0f}")
            ev.close()
        print(
            f"agreement on {len(sfens)} positions of its own games: top-1 move {agree['top1']:.3f}, "
            f"KL {agree['kl']:.4f}, value |diff| {agree['value_mae']:.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
