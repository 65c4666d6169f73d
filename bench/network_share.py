#!/usr/bin/env python3
"""How much of the network's own speed the searches keep, with a real network on CPU: self-play
network rows/s and the USI PUCT search's playouts/s, each next to the raw forward rate of the same
evaluator at the same batch size measured in the same run (the target: >= 90%).

  python bench/network_share.py                       # the shipped model on onnxruntime (~2 min)
  python bench/network_share.py --backend torch --model M --games 32 --seconds 10
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.search_ceiling import playout_rates  # noqa: E402
from engine.backends.choose import create_evaluator  # noqa: E402
from engine.backends.evaluator import Evaluator  # noqa: E402
from engine.core.features import FEATURES2_NUM  # noqa: E402
from engine.search.control import SearchControl  # noqa: E402
from engine.search.gumbel_tree import warm_up  # noqa: E402
from engine.search.puct import PuctParams  # noqa: E402
from engine.search.puct_tree import FastSearch  # noqa: E402
from engine.selfplay.config import SelfPlayConfig  # noqa: E402
from engine.selfplay.processes import run_selfplay  # noqa: E402


def forward_rate(ev: Evaluator, batch: int, seconds: float) -> float:
    """Rows/s of back-to-back forward calls of `batch` rows (inputs left as they are: the speed of a
    dense network does not depend on them)."""
    ev.evaluate(batch)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        ev.evaluate(batch)
        calls += 1
    return calls * batch / (time.perf_counter() - start)


def selfplay_rate(ev: Evaluator, games: int, sims: int, max_moves: int) -> tuple[float, float]:
    """(network rows/s, mean rows per call) of self-play with `games` games in flight."""
    with tempfile.TemporaryDirectory() as out:
        config = SelfPlayConfig(
            out_dir=out, games=games, parallel=games, sims=sims, max_moves=max_moves, batch=ev.max_batch,
            progress=False,
        )  # fmt: skip
        stats = run_selfplay(config, evaluator=ev)
    return stats.nn_positions / stats.seconds, stats.nn_positions / max(stats.nn_batches, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint or ONNX model (default: the shipped one)")
    ap.add_argument("--backend", default="onnx", help="auto, torch, onnx (onnxruntime) or trt")
    ap.add_argument("--games", type=int, default=16, help="self-play games in flight")
    ap.add_argument("--sims", type=int, default=32)
    ap.add_argument("--max-moves", type=int, default=40)
    ap.add_argument("--batch", type=int, default=32, help="PUCT batch size")
    ap.add_argument("--playouts", type=int, default=3000, help="PUCT playouts per position")
    ap.add_argument("--seconds", type=float, default=5.0, help="per forward-rate measure")
    args = ap.parse_args()
    warm_up(FEATURES2_NUM)
    ev = create_evaluator(args.model, backend=args.backend, max_batch=256, log=lambda _: None)
    sp_rows, sp_batch = selfplay_rate(ev, args.games, args.sims, args.max_moves)
    sp_forward = forward_rate(ev, round(sp_batch), args.seconds)
    puct = playout_rates(FastSearch, PuctParams, SearchControl, ev, args.batch, args.playouts)
    puct_forward = forward_rate(ev, args.batch, args.seconds)
    print(f"{ev.name}; self-play {args.games} games x {args.sims} sims; PUCT batch {args.batch}")
    print(f"{'measure':34} {'search':>9} {'forward':>9} {'share':>6}")
    label = f"self-play rows/s (batch {sp_batch:.1f})"
    print(f"{label:34} {sp_rows:9.0f} {sp_forward:9.0f} {sp_rows / sp_forward:6.0%}")
    for name, rate in puct.items():
        print(f"{f'PUCT {name} playouts/s':34} {rate:9.0f} {puct_forward:9.0f} {rate / puct_forward:6.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
