"""A material-greedy USI player: a fixed, network-free yardstick for the learning loop.

Each move: declare a nyugyoku win if it can, play a mate in one if there is one, else take the
legal move with the best material balance after the move minus the opponent's best immediate
material gain in reply (a capture or promotion; one ply plus the recapture), avoiding moves that
allow a mate in one. Ties are broken by a seeded RNG (option `Seed`) that runs on across the games
of one engine process, so a match is reproducible but its games differ. Time controls are ignored.

    python -m engine.match.greedy_usi        (or bin/greedy_usi)
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from typing import IO

import cshogi

from engine.core.position import board_after, parse_position

NAME = "GreedyMaterial"
# Apery-style piece values (centipawns) by cshogi piece type 1..14; a piece in hand counts its
# unpromoted value, so a capture gains the victim's board value plus its hand value.
PIECE_VALUE = (0, 90, 315, 405, 495, 855, 990, 540, 0, 540, 540, 540, 540, 945, 1395)
MATED = -1_000_000


def unpromoted(piece_type: int) -> int:
    return piece_type - 8 if piece_type > 8 else piece_type


def move_gain(move: int) -> int:
    """Material the mover gains with `move`: the captured piece (board value + hand value), plus
    the promotion bonus."""
    gain = 0
    captured = cshogi.move_cap(move)
    if captured:
        gain += PIECE_VALUE[captured] + PIECE_VALUE[unpromoted(captured)]
    if cshogi.move_is_promotion(move):
        moved = cshogi.move_from_piece_type(move)
        gain += PIECE_VALUE[moved + 8] - PIECE_VALUE[moved]
    return gain


def move_score(board: cshogi.Board, move: int) -> int:
    """Material change of `move` for the mover after the opponent's best immediate reply."""
    gain = move_gain(move)
    board.push(move)
    try:
        if board.is_game_over():
            return -MATED  # the opponent has no legal move: mate
        if not board.is_check() and board.mate_move_in_1ply():
            return MATED + gain
        reply = max((move_gain(m) for m in board.legal_moves), default=0)
    finally:
        board.pop()
    return gain - max(reply, 0)


def choose_move(board: cshogi.Board, rng: random.Random) -> str:
    """The `bestmove` argument: a USI move, `win` (nyugyoku declaration) or `resign`."""
    if board.is_nyugyoku():
        return "win"
    moves = list(board.legal_moves)
    if not moves:
        return "resign"
    if not board.is_check():
        mate = board.mate_move_in_1ply()
        if mate:
            return cshogi.move_to_usi(mate)
    scores = [move_score(board, m) for m in moves]
    best = max(scores)
    return cshogi.move_to_usi(rng.choice([m for m, s in zip(moves, scores, strict=True) if s == best]))


class GreedyPlayer:
    """The USI command loop; `out` receives reply lines."""

    def __init__(self, out: Callable[[str], None]) -> None:
        self.out = out
        self.seed = 0
        self.rng = random.Random(self.seed)
        self.board = cshogi.Board()

    def handle(self, line: str) -> bool:
        """One command; False after quit. Bad input is reported as `info string error:` and ignored."""
        tokens = line.split()
        if not tokens:
            return True
        cmd, args = tokens[0], tokens[1:]
        if cmd == "quit":
            return False
        if cmd == "usi":
            self.out(f"id name {NAME}")
            self.out("id author gumbel-shogi developers")
            self.out("option name Seed type spin default 0 min 0 max 2147483647")
            self.out("usiok")
        elif cmd == "isready":
            self.out("readyok")
        elif cmd == "setoption":
            self.setoption(args)
        elif cmd == "position":
            try:
                self.board = board_after(*parse_position(args))
            except ValueError as e:
                self.out(f"info string error: position: {e} (position unchanged)")
        elif cmd == "go":
            if args[:1] == ["mate"]:
                self.out("checkmate notimplemented")
            else:
                self.out(f"bestmove {choose_move(self.board, self.rng)}")
        return True  # usinewgame, stop, ponderhit, gameover: nothing to do for a one-shot player

    def setoption(self, args: list[str]) -> None:
        if len(args) == 4 and args[0] == "name" and args[1].lower() == "seed" and args[2] == "value":
            if args[3].isdigit():
                self.seed = int(args[3])
                self.rng = random.Random(self.seed)
                return
            self.out(f"info string error: setoption: Seed needs a non-negative integer, got {args[3]!r}")
        elif len(args) >= 2 and args[0] == "name":
            self.out(f"info string error: setoption: unknown option {args[1]!r}")
        else:
            self.out("info string error: setoption needs: setoption name <id> value <x>")

    def run(self, stream: IO[str]) -> None:
        for line in stream:
            if not self.handle(line):
                return


def main(argv: list[str] | None = None) -> int:
    """Speak USI on stdin/stdout; the only arguments are --help (a GUI gives none)."""
    argparse.ArgumentParser(
        prog="greedy_usi",
        description=__doc__.split("\n")[0],
        epilog="It reads USI commands on stdin: register it in a GUI or give it to bin/match.",
    ).parse_args(argv)
    serve_stdio(GreedyPlayer)
    return 0


def serve_stdio(make_player: Callable[[Callable[[str], None]], GreedyPlayer]) -> None:
    """Run a player on stdin/stdout as a GUI starts it; a closed pipe ends it quietly."""

    def write(line: str) -> None:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):
            raise SystemExit(0) from None

    sys.stdin.reconfigure(encoding="utf-8", errors="replace")
    make_player(write).run(sys.stdin)


if __name__ == "__main__":
    sys.exit(main())
