#!/usr/bin/env python3
"""Several devices in one host, planned on CPU: the same search processes feeding one inference server
against one server per device (`--devices`), each device a latency model slow enough to be the
bottleneck (default 1 ms + 0.1 ms a row: at most 10k rows/s, whatever the batch; two search processes
on the 2 shared cores of the development machine make about 26k rows/s, too few to keep two devices of
20k rows/s busy, which `--b-ms 0.05` shows: x1.61, the devices 68% busy).

Printed in one run: network rows/s, positions/s, rows per call and each device's busy share with 1
device and with 2, and the ratio, against the target (>= 1.8x with 2 devices).

  python bench/multi_device_selfplay.py                 # about a minute on 2 cores
  python bench/multi_device_selfplay.py --processes 4 --devices 1,2,4 --games 128
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.evaluator import LatencyModelEvaluator, UniformEvaluator  # noqa: E402
from engine.selfplay.config import SelfPlayConfig  # noqa: E402
from engine.selfplay.processes import run_selfplay  # noqa: E402
from engine.selfplay.stats import SelfPlayStats  # noqa: E402


def _config(args: argparse.Namespace, out: str, devices: int) -> SelfPlayConfig:
    return SelfPlayConfig(
        out_dir=out, games=args.games * args.processes, parallel=args.games, processes=args.processes,
        sims=args.sims, max_moves=args.max_moves, batch=args.batch, groups=args.groups, progress=False,
        devices=["cpu"] * devices, threads=1,
    )  # fmt: skip


def run(args: argparse.Namespace, devices: int) -> SelfPlayStats:
    device = functools.partial(LatencyModelEvaluator, a_ms=args.a_ms, b_ms=args.b_ms)
    with tempfile.TemporaryDirectory() as tmp:
        return run_selfplay(_config(args, tmp, devices), shared_evaluator=device)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a-ms", type=float, default=1.0, help="latency model: ms per call")
    ap.add_argument("--b-ms", type=float, default=0.1, help="latency model: ms per row")
    ap.add_argument("--processes", type=int, default=2, help="search processes (the same in every run)")
    ap.add_argument("--devices", default="1,2", help="device counts to compare (the first is the baseline)")
    ap.add_argument("--games", type=int, default=128, help="games per process, all in flight")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--sims", type=int, default=16)
    ap.add_argument("--max-moves", type=int, default=24, help="plies per game (short games keep it quick)")
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    counts = [int(d) for d in args.devices.split(",")]
    with tempfile.TemporaryDirectory() as tmp:  # warm-up: imports, numba's first calls
        warm = SelfPlayConfig(out_dir=tmp, games=2, parallel=2, max_moves=4, sims=4, progress=False)
        run_selfplay(warm, UniformEvaluator(16))
    rows = [(d, run(args, d)) for d in counts]
    rate = 1000 / args.b_ms if args.b_ms else float("inf")
    print(
        f"latency model a={args.a_ms:g} ms + b={args.b_ms:g} ms/row (at most {rate:.0f} rows/s a device); "
        f"{args.processes} search processes x {args.games} games x {args.sims} sims, "
        f"max {args.max_moves} plies"
    )
    print(f"{'devices':>7} {'rows/s':>9} {'pos/s':>8} {'rows/call':>9} {'seconds':>8}  busy % per device")
    for d, s in rows:
        busy = " ".join(f"{100 * v['busy'] / s.seconds:.0f}" for v in s.servers)
        calls = max(s.server_calls, 1)
        print(
            f"{d:7d} {s.nn_positions / s.seconds:9.0f} {s.pos_per_s:8.1f} {s.nn_positions / calls:9.1f} "
            f"{s.seconds:8.1f}  {busy}"
        )
    base = rows[0][1].nn_positions / rows[0][1].seconds
    for d, s in rows[1:]:
        ratio = s.nn_positions / s.seconds / base
        print(f"{d} devices: x{ratio:.2f} the rows/s of {counts[0]} (target with 2: >= x1.8)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
