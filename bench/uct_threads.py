#!/usr/bin/env python3
"""The USI engine's search speed by UCT_Threads (batches in flight) and DNN_Batch_Size, with the network
loaded exactly as the engine loads it (engine.play.network.load_evaluators, default options otherwise):
PUCT playouts per second on positions of real play. The first configuration is the baseline (the engine's
default before UCT_Threads: one batch of 32); configurations alternate, best of --repeat each.
Usage: bench/uct_threads.py [--model M] [--seconds S] [--repeat N] [--configs 1x32 2x16 ...]"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cshogi  # noqa: E402

from engine.play.network import load_evaluators  # noqa: E402
from engine.play.options import default_options, search_params  # noqa: E402
from engine.search.control import SearchControl  # noqa: E402
from engine.search.puct_tree import FastSearch  # noqa: E402

# The start, an opening and a middle game the shipped network reached playing itself.
POSITIONS = {
    "startpos": cshogi.STARTING_SFEN,
    "opening": "lnsgkgsnl/1r5b1/pppppp1pp/6p2/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL b - 3",
    "middle": "ln3g1nl/1g4sk1/p1p1Pp1pp/1p2p4/3ps4/+B1P6/PPSP1PPPP/3KG4/LN3GSNL b Rrbp 51",
}


def playouts_per_second(search: FastSearch, sfen: str, seconds: float) -> float:
    search.clear()
    search.set_position(sfen, [])
    control = SearchControl(infinite=True)  # a fixed time: no early stop
    timer = threading.Timer(seconds, lambda: setattr(control, "stopped", True))
    timer.start()
    result = search.run(control)
    timer.join()
    return result.playouts / result.elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None, help="model file (default: the shipped one)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--configs", nargs="+", default=["1x32", "2x16", "2x32"], help="UCT_THREADSxBATCH")
    args = ap.parse_args()
    values = {o.name: o.default for o in default_options()}
    searches = {}
    for config in args.configs:
        slots, batch = (int(x) for x in config.split("x"))
        evs = load_evaluators(Path(args.model) if args.model else None, {**values, "UCT_Threads": slots,
                              "DNN_Batch_Size": batch}, lambda m: None)  # fmt: skip
        searches[config] = FastSearch(evs[0], search_params(values), batch_size=batch, spares=evs[1:])
    best = {(c, p): 0.0 for c in searches for p in POSITIONS}
    for _ in range(args.repeat):
        for pos, sfen in POSITIONS.items():
            for config, search in searches.items():
                best[config, pos] = max(best[config, pos], playouts_per_second(search, sfen, args.seconds))
    base = args.configs[0]
    print(f"{'UCT_Threads x batch':20}" + "".join(f"{p:>18}" for p in POSITIONS) + f"   (baseline {base})")
    for config in searches:
        cells = [f"{best[config, p]:8.0f} x{best[config, p] / best[base, p]:.2f}" for p in POSITIONS]
        print(f"{config:20}" + "".join(f"{c:>18}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
