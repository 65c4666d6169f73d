#!/usr/bin/env python3
"""Distillation teachers' positions/s on this CPU, batched as bin/distill batches them: miniosl's network
(history included: its features are built from each game's moves) and our shipped model as the baseline,
in the same run on the same positions (random games, 0-160 plies). Each figure is the whole `judge` call:
inputs, network and the policy over the legal moves.

  bench/teacher_throughput.py [--positions 1024] [--batch 64] [--threads 1] [--miniosl PATH.onnx]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cshogi  # noqa: E402

from engine.core.position import random_positions  # noqa: E402
from engine.errors import UserError, cli_main  # noqa: E402
from train.teachers.choose import open_teacher  # noqa: E402
from train.teachers.teacher import MINIOSL, GamePosition, Teacher  # noqa: E402


def positions_per_second(teacher: Teacher, positions: list[GamePosition], batch: int) -> float:
    """Throughput of `judge` over `positions` in batches, after one warm-up batch."""
    teacher.judge(positions[:batch])
    start = time.perf_counter()
    for a in range(0, len(positions), batch):
        teacher.judge(positions[a : a + batch])
    return len(positions) / (time.perf_counter() - start)


@cli_main("teacher_throughput")
def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--positions", type=int, default=1024)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="the runtimes' CPU threads")
    p.add_argument("--miniosl", default="", help="miniosl's ONNX (default: its pretrained eval.onnx)")
    p.add_argument("--model", help="our model, the baseline (default: the shipped one)")
    args = p.parse_args()
    if min(args.positions, args.batch, args.threads) < 1:
        raise UserError("--positions, --batch and --threads must be >= 1")
    boards = [b for b in random_positions(args.positions, seed=1, max_plies=160) if not b.is_game_over()]
    positions = [GamePosition(cshogi.STARTING_SFEN, list(b.history), b) for b in boards]
    for label, spec in (
        (args.miniosl or "miniosl's eval.onnx", f"{MINIOSL}:{args.miniosl}"),
        (args.model or "models/default.pt", args.model),
    ):
        teacher = open_teacher(spec, max_batch=args.batch, threads=args.threads)
        try:
            rate = positions_per_second(teacher, positions, args.batch)
        finally:
            teacher.close()
        print(f"{label}: {rate:.1f} positions/s (batch {args.batch}, {args.threads} threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
