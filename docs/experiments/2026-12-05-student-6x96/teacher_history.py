#!/usr/bin/env python3
"""How much miniosl's first move depends on the game's history, which our students never see (dlshogi's
inputs are the bare position): on the positions of hcpe3 games (e.g. models/heldout/miniosl-seed2), the
teacher's first move given the last moves against the same network given the bare position (its history
planes empty), and a student's first move against both. It tells whether the teacher's labels carry
information the student's inputs lack, and whether the teacher without history is still the same player.

  docs/experiments/2026-12-05-student-6x96/teacher_history.py models/heldout/miniosl-seed2 \
      [--model models/default.pt] [--batch 64]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

import cshogi  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from engine.errors import UserError, cli_main  # noqa: E402
from engine.records.hcpe3_games import iter_hcpe3_games  # noqa: E402
from train.data.convert import expand_inputs  # noqa: E402
from train.teachers.choose import open_teacher  # noqa: E402
from train.teachers.teacher import MINIOSL, GamePosition, Teacher  # noqa: E402


def game_positions(paths: list[Path]) -> Iterator[tuple[GamePosition, GamePosition]]:
    """Each position of each game twice: with the moves from the game's start, and bare."""
    for path in paths:
        for game in iter_hcpe3_games(path):
            board = cshogi.Board()
            board.set_hcp(game.hcp)
            start, moves = board.sfen(), []
            for info in game.moves:
                if board.is_game_over():
                    break
                here = board.copy()
                yield GamePosition(start, list(moves), here), GamePosition(here.sfen(), [], here)
                move = board.move_from_move16(int(info["selectedMove16"]))
                moves.append(move)
                board.push(move)


def first_moves(teacher: Teacher, positions: list[GamePosition]) -> np.ndarray:
    """Each position's likeliest move (cshogi int) by `teacher`."""
    return np.array([int(j.moves[np.argmax(j.policy)]) for j in teacher.judge(positions)])


@cli_main("teacher_history")
def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("records", nargs="+", help="hcpe3 files or folders of them")
    p.add_argument("--model", help="the student (default: the shipped model)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="the runtimes' CPU threads")
    args = p.parse_args()
    if min(args.batch, args.threads) < 1:
        raise UserError("--batch and --threads must be >= 1")
    paths = expand_inputs(args.records, (".hcpe3",), "hcpe3")
    teacher = open_teacher(MINIOSL, max_batch=args.batch, threads=args.threads)
    student = open_teacher(args.model, max_batch=args.batch, threads=args.threads)
    pairs = list(game_positions(paths))
    rows = []
    for a in tqdm(range(0, len(pairs), args.batch), unit="batch", desc="teacher_history"):
        with_history, bare = zip(*pairs[a : a + args.batch], strict=True)
        rows.append(
            np.stack(
                [
                    first_moves(teacher, list(with_history)),
                    first_moves(teacher, list(bare)),
                    first_moves(student, list(bare)),
                ]
            )
        )
    history, no_history, own = np.concatenate(rows, axis=1)
    print(f"{len(pairs)} positions of {len(paths)} files; student {args.model or 'models/default.pt'}")
    print(f"teacher without history = teacher with it: {np.mean(no_history == history):.3f}")
    print(f"student = teacher with history:             {np.mean(own == history):.3f}")
    print(f"student = teacher without history:          {np.mean(own == no_history):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
