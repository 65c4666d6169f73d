#!/usr/bin/env python3
"""Seconds per move of a corpus teacher at several strength settings, on middle-game positions from
real games: the cost side of "which setting gives the best games per hour". The first --limit is the
baseline the others are compared against, in the same run.

A limit is either a go limit, `byoyomi:MS`, `nodes:N` or `depth:N`, or an engine option that limits
the search, `NAME=VALUE` (e.g. gpsshogi's `LimitDepth=4`), searched under a 60 s byoyomi cap.
gpsshogi stores its options between runs, so give it `LimitDepth=10` for the clock limits:

  bench/teacher_cost.py --engine /usr/games/gpsusi --option Thread=1 --option LimitDepth=10 \\
      --positions corpus.hcpe --limit byoyomi:1000 --limit LimitDepth=4 --limit LimitDepth=5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cshogi  # noqa: E402
import numpy as np  # noqa: E402

from engine.usi_client import EngineSpec, started  # noqa: E402
from train.data.readers import read_hcpe  # noqa: E402

CAP_MS = 60000  # the byoyomi under an option limit: long enough never to cut the search


def sample_sfens(path: str, count: int, skip: int) -> list[str]:
    """`count` positions spread evenly over the file, past its first `skip` rows."""
    rows = read_hcpe(path)
    board = cshogi.Board()
    sfens = []
    for i in np.linspace(min(skip, len(rows) - 1), len(rows) - 1, count).astype(int):
        board.set_hcp(rows[i]["hcp"])
        sfens.append(board.sfen())
    return sfens


def seconds_per_move(spec: EngineSpec, limit: str, sfens: list[str]) -> list[float]:
    """One fresh engine per limit (no hash carried over), one timed `go` per position."""
    options, go = dict(spec.options), {}
    if "=" in limit:
        name, value = limit.split("=", 1)
        options[name], go = value, {"byoyomi": CAP_MS}
    else:
        kind, value = limit.split(":", 1)
        go = {kind: int(value)}
    with started([EngineSpec(spec.command, options)], timeout=CAP_MS / 1000) as (engine,):
        times = []
        for sfen in sfens:
            engine.usinewgame()
            engine.position(sfen=f"sfen {sfen}")
            t = time.perf_counter()
            engine.go(**go)
            times.append(time.perf_counter() - t)
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", required=True, help="the teacher's command line")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", help="USI option for all")
    p.add_argument("--positions", required=True, help="hcpe file of real games' positions")
    p.add_argument("--count", type=int, default=10, help="positions to time")
    p.add_argument("--skip", type=int, default=30, help="rows to skip at the start (opening positions)")
    p.add_argument(
        "--limit", action="append", required=True, help="byoyomi:MS, nodes:N, depth:N or NAME=VALUE"
    )
    args = p.parse_args()
    spec = EngineSpec(args.engine, dict(o.split("=", 1) for o in args.option))
    sfens = sample_sfens(args.positions, args.count, args.skip)
    print(f"{args.engine}, {len(sfens)} positions from {args.positions}")
    print(f"{'limit':<16} {'mean s':>8} {'median s':>9} {'max s':>7} {'vs baseline':>12}")
    baseline = None
    for limit in args.limit:
        times = seconds_per_move(spec, limit, sfens)
        mean = statistics.fmean(times)
        baseline = baseline or mean
        median, slowest = statistics.median(times), max(times)
        print(f"{limit:<16} {mean:8.3f} {median:9.3f} {slowest:7.3f} {mean / baseline:11.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
