#!/usr/bin/env python3
"""PUCT search speed (playouts/s) at the start position and a middle-game position, per backend and
batch size; batch size 1 in the same run is the baseline. Usage: bench/nps.py [--model M] [--seconds S]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cshogi  # noqa: E402

from engine.backends.choose import create_evaluator  # noqa: E402
from engine.search.control import SearchControl  # noqa: E402
from engine.search.puct import PuctParams, Search  # noqa: E402

POSITIONS = {
    "startpos": (cshogi.STARTING_SFEN, []),
    "middle": ("ln3g1nl/1g4sk1/p1p1Pp1pp/1p2p4/3ps4/+B1P6/PPSP1PPPP/3KG4/LN3GSNL b Rrbp 51", []),
}


def measure(backend: str, model: str | None, batch: int, seconds: float) -> dict[str, float]:
    ev = create_evaluator(model, backend=backend, max_batch=batch, log=lambda m: None)
    ev.evaluate(batch)
    out = {}
    for name, (sfen, moves) in POSITIONS.items():
        search = Search(ev, PuctParams(), batch_size=batch)
        search.set_position(sfen, moves)
        search.evaluate_root()  # the first call may be slow (allocation); keep it out of the timing
        control = SearchControl()
        control.target = control.hard = control.start + seconds
        r = search.run(control)
        out[name] = r.playouts / r.elapsed
    ev.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None, help="model file (default: shipped or random-init small)")
    ap.add_argument("--backends", nargs="+", default=["torch", "onnx"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32])
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    print(f"{'backend':8} {'batch':>5} {'startpos nps':>13} {'middle nps':>11}  (batch 1 = baseline)")
    for backend in args.backends:
        base = None
        for batch in args.batches:
            try:
                r = measure(backend, args.model, batch, args.seconds)
            except Exception as e:  # a backend missing on this machine
                print(f"{backend:8} {batch:5} unavailable: {str(e).splitlines()[0][:80]}")
                break
            base = base or r
            ratio = r["startpos"] / base["startpos"]
            print(
                f"{backend:8} {batch:5} {r['startpos']:13.0f} {r['middle']:11.0f}  x{ratio:.2f}", flush=True
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
