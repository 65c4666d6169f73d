#!/usr/bin/env python3
"""Self-play through Ray against plain multi-process self-play, in one run on one machine.

The same work both ways: `bin/selfplay --processes 2` (two search processes, each with its own
evaluator), then a local Ray cluster of two nodes (`ray.cluster_utils.Cluster`, one CPU each) with one
actor per node playing through one search process, the games sent back to the driver, which writes
them. Both are timed end to end (the command's call, set-up included; the cluster is started before),
so the difference is Ray's cost: actor start, the model through the object store, games through Ray,
the driver's writing. Prints positions/s of each and Ray's overhead (target <= 10%).

  python bench/ray_selfplay.py                    # about 3 minutes on 2 cores
  python bench/ray_selfplay.py --games 64 --sims 16 [--model M] [--backend torch]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.selfplay.config import SelfPlayConfig  # noqa: E402


def _config(args: argparse.Namespace, out: str, processes: int, parallel: int) -> SelfPlayConfig:
    return SelfPlayConfig(
        out_dir=out, games=args.games, parallel=parallel, processes=processes, sims=args.sims,
        max_moves=args.max_moves, model=args.model, backend=args.backend, threads=1, progress=False,
        seed=args.seed,
    )  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--games", type=int, default=48)
    ap.add_argument("--parallel", type=int, default=8, help="games in flight per search process")
    ap.add_argument("--sims", type=int, default=16)
    ap.add_argument("--max-moves", type=int, default=80)
    ap.add_argument("--model", help="default: the shipped model")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    from engine.selfplay.cluster import run_cluster_selfplay
    from engine.selfplay.processes import run_selfplay

    with tempfile.TemporaryDirectory() as tmp:
        warm = SelfPlayConfig(out_dir=f"{tmp}/warm", games=2, parallel=2, sims=4, max_moves=4, progress=False,
                              model=args.model, backend=args.backend, threads=1)  # fmt: skip
        run_selfplay(warm)  # caches: ONNX export, numba kernels
        start = time.perf_counter()
        plain = run_selfplay(_config(args, f"{tmp}/plain", 2, args.parallel))
        plain_wall = time.perf_counter() - start
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            start = time.perf_counter()
            report = run_cluster_selfplay(_config(args, f"{tmp}/ray", 1, args.parallel), cluster.address)
            ray_wall = time.perf_counter() - start
        finally:
            if ray.is_initialized():
                ray.shutdown()
            cluster.shutdown()
    plain_rate, ray_rate = plain.positions / plain_wall, report.positions / ray_wall
    work = f"{args.games} games x {args.sims} sims, max {args.max_moves} plies"
    print(f"{work}, {args.parallel} in flight per search process")
    print(f"{'run':40} {'games':>5} {'positions':>9} {'seconds':>8} {'pos/s':>7}")
    runs = [
        ("bin/selfplay --processes 2 (baseline)", plain.games, plain.positions, plain_wall, plain_rate),
        ("Ray: 2 nodes x 1 actor x 1 process", report.written, report.positions, ray_wall, ray_rate),
    ]
    for name, games, positions, seconds, rate in runs:
        print(f"{name:40} {games:5d} {positions:9d} {seconds:8.1f} {rate:7.1f}")
    nodes = ", ".join(f"{n} {g}" for n, g in report.nodes.items())
    print(f"games per node: {nodes}; actors playing {100 * report.utilisation:.0f}% of their time")
    print(f"Ray's overhead: {100 * (1 - ray_rate / plain_rate):+.1f}% of the positions/s (target <= 10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
