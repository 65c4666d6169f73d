"""A distillation teacher as a plain USI engine that plays its policy's likeliest move, without search.

With it `bin/match` places a student against its teacher. It reuses the material-greedy player's command
loop (engine/match/greedy_usi.py: isready, setoption Seed, quit, errors as `info string`) and keeps the
whole game of each `position` command, since miniosl's network reads the last moves. It declares a
nyugyoku win when it can, resigns without a legal move and ignores the clock.

    bin/teacher_usi [--teacher miniosl[:PATH.onnx] | MODEL]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import cshogi
import numpy as np

from engine.core.position import board_after, parse_position
from engine.errors import UserError, cli_main
from engine.match.greedy_usi import GreedyPlayer, serve_stdio
from train.teachers.choose import open_teacher
from train.teachers.teacher import MINIOSL, GamePosition, Teacher


def greedy_move(teacher: Teacher, position: GamePosition) -> str:
    """The `bestmove` argument: `win` (nyugyoku), `resign` (no legal move) or the teacher's likeliest move."""
    if position.board.is_nyugyoku():
        return "win"
    if position.board.is_game_over():
        return "resign"
    judged = teacher.judge([position])[0]
    return cshogi.move_to_usi(int(judged.moves[int(np.argmax(judged.policy))]))


class TeacherPlayer(GreedyPlayer):
    """The greedy player's USI loop with the teacher choosing the moves."""

    def __init__(self, out: Callable[[str], None], teacher: Teacher, name: str) -> None:
        super().__init__(out)
        self.teacher = teacher
        self.name = name
        self.position = GamePosition(cshogi.STARTING_SFEN, [], cshogi.Board())

    def handle(self, line: str) -> bool:
        cmd, *args = line.split() or [""]
        if cmd == "usi":
            self.out(f"id name {self.name}")
            self.out("id author gumbel-shogi developers")
            self.out("usiok")
        elif cmd == "position":
            try:
                sfen, moves = parse_position(args)
                self.position = GamePosition(sfen, moves, board_after(sfen, moves))
            except ValueError as e:
                self.out(f"info string error: position: {e} (position unchanged)")
        elif cmd == "go" and args[:1] != ["mate"]:
            self.out(f"bestmove {greedy_move(self.teacher, self.position)}")
        else:
            return super().handle(line)
        return True


@cli_main("teacher_usi")
def main(argv: list[str] | None = None) -> int:
    """Speak USI on stdin/stdout with the teacher `--teacher` names (default: miniosl's network)."""
    parser = argparse.ArgumentParser(
        prog="teacher_usi",
        description=__doc__.split("\n")[0],
        epilog="It reads USI commands on stdin: register it in a GUI or give it to bin/match.",
    )
    parser.add_argument("--teacher", default=MINIOSL, help="miniosl[:PATH.onnx] (default) or a model of ours")
    parser.add_argument("--threads", type=int, default=1, help="the runtime's CPU threads")
    args = parser.parse_args(argv)
    if args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    teacher = open_teacher(args.teacher, max_batch=1, threads=args.threads)
    try:
        serve_stdio(lambda write: TeacherPlayer(write, teacher, f"Teacher-{args.teacher}"))
    finally:
        teacher.close()
    return 0
