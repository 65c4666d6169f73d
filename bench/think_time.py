#!/usr/bin/env python3
"""How much of a byoyomi each USI engine uses: every engine plays the same game (its own moves for both
sides, from the start position) at `go btime 0 wtime 0 byoyomi MS`, and the wall time from `go` to
`bestmove` and the nodes of its last info line are recorded for each move. In byoyomi, time an engine
leaves unused is lost; the first engine is the baseline the others are printed against.
Usage: bench/think_time.py ENGINE [ENGINE ...] [--byoyomi MS] [--plies N] [--option NAME=VALUE]"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cshogi  # noqa: E402
import numpy as np  # noqa: E402

from engine.usi_client import EngineSpec, parse_usi_options, started  # noqa: E402


def think_times(engine, plies: int, byoyomi: int) -> tuple[np.ndarray, list[int]]:
    """(seconds per move, nodes per move) over one game of the engine against itself."""
    board, moves, seconds, nodes = cshogi.Board(), [], [], []
    engine.usinewgame()
    for _ in range(plies):
        if board.is_game_over():
            break
        engine.position(moves)
        start = time.monotonic()
        bestmove, _ = engine.go(byoyomi=byoyomi)
        seconds.append(time.monotonic() - start)
        nodes.append(engine.last_nodes or 0)
        if bestmove in ("resign", "win"):
            break
        board.push_usi(bestmove)
        moves.append(bestmove)
    return np.array(seconds), nodes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engines", nargs="+", help="USI engine commands; the first is the baseline")
    ap.add_argument("--byoyomi", type=int, default=1000, help="ms per move (default 1000)")
    ap.add_argument("--plies", type=int, default=40, help="moves per game (default 40)")
    ap.add_argument("--option", action="append", default=[], help="NAME=VALUE for every engine")
    args = ap.parse_args()
    # Book moves take no time: every move is searched unless --option USI_OwnBook=true says otherwise.
    options = {"USI_OwnBook": "false", **parse_usi_options(args.option)}
    base = None
    print(f"go byoyomi {args.byoyomi}, {args.plies} plies of each engine's own game")
    for command in args.engines:
        with started([EngineSpec(command, options)]) as (engine,):
            s, nodes = think_times(engine, args.plies, args.byoyomi)
        share = s.mean() * 1000 / args.byoyomi
        base = share if base is None else base
        short = int((s * 1000 < args.byoyomi / 2).sum())
        print(
            f"{command}: {len(s)} moves, mean {s.mean() * 1000:.0f} ms ({share:.0%} of the byoyomi, "
            f"x{share / base:.2f} the baseline), min {s.min() * 1000:.0f} ms, under half: {short}, "
            f"nodes/move {np.mean(nodes):,.0f}"
        )


if __name__ == "__main__":
    main()
