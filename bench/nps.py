#!/usr/bin/env python3
"""The USI engine's search speed: playouts/s of the search `bin/usi_engine` runs (puct_tree.FastSearch
with the engine's default options, one batch in flight) at the start position and a middle-game
position, per backend and batch size, each next to the baseline measured in the same run on the same
evaluator: the network's own rows/s at that batch (back-to-back forward calls), which a search that
keeps the network busy approaches (above 100 %: playouts that needed no network call, answered by the
search's cache of positions or by the rules). The readable reference search (engine.search.puct.Search)
is the second line, with its share too.

  python bench/nps.py                                   # the shipped model as the engine runs it here
  python bench/nps.py --backends onnx torch --batches 16 32 --threads 1 --seconds 5 --model M
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.network_share import forward_rate  # noqa: E402
from bench.search_ceiling import POSITIONS  # noqa: E402
from engine.backends.choose import create_evaluator  # noqa: E402
from engine.backends.evaluator import Evaluator  # noqa: E402
from engine.play.options import default_options, search_params  # noqa: E402
from engine.search.control import SearchControl  # noqa: E402
from engine.search.puct import Search  # noqa: E402
from engine.search.puct_tree import FastSearch  # noqa: E402

SEARCHES = {"engine (FastSearch)": FastSearch, "reference (Search)": Search}


def playouts_per_s(
    search_type: type[Search], ev: Evaluator, batch: int, position: str, seconds: float
) -> float:
    """Playouts/s of a fresh search from one of POSITIONS for `seconds`, its root evaluated (and the
    search's kernels compiled) before the clock starts."""
    sfen, moves = POSITIONS[position]
    search = search_type(ev, search_params({o.name: o.default for o in default_options()}), batch_size=batch)
    search.set_position(sfen, moves)
    search.evaluate_root()
    control = SearchControl()
    control.target = control.hard = control.start + seconds
    result = search.run(control)
    return result.playouts / result.elapsed


def measure(ev: Evaluator, batch: int, seconds: float, searches: dict[str, type[Search]]) -> list[str]:
    """The lines of one evaluator at one batch size: the network's rows/s, then each search's playouts/s
    and its share of them, per position."""
    network = forward_rate(ev, batch, seconds)
    rows = {"network rows/s": [network] * len(POSITIONS)}
    for name, search_type in searches.items():
        rows[name] = [playouts_per_s(search_type, ev, batch, p, seconds) for p in POSITIONS]
    return [
        f"{batch:5}  {name:24}" + "".join(f" {rate:11.0f} {rate / network:6.0%}" for rate in rates)
        for name, rates in rows.items()
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model file (default: the shipped one)")
    ap.add_argument(
        "--backends", nargs="+", default=["auto"], help="auto (the engine's choice), torch, onnx, trt"
    )
    ap.add_argument("--batches", nargs="+", type=int, default=[16, 32], help="DNN_Batch_Size (engine: 16)")
    ap.add_argument("--threads", type=int, default=None, help="intra-op threads (default: the runtime's)")
    ap.add_argument("--no-int8", dest="int8", action="store_false", help="fp32 on onnxruntime's CPU path")
    ap.add_argument("--no-reference", dest="reference", action="store_false", help="the engine's search only")
    ap.add_argument("--seconds", type=float, default=3.0, help="per figure")
    args = ap.parse_args()
    searches = SEARCHES if args.reference else dict(list(SEARCHES.items())[:1])
    for backend in args.backends:
        for batch in args.batches:
            try:
                ev = create_evaluator(
                    args.model, backend=backend, max_batch=batch, threads=args.threads, int8=args.int8,
                    log=lambda _: None,
                )  # fmt: skip
            except Exception as e:  # a backend missing on this machine
                print(f"{backend}: unavailable: {str(e).splitlines()[0][:100]}")
                break
            try:
                if batch == args.batches[0]:
                    print(f"\n{ev.name}; share = playouts/s over the network's rows/s at the same batch")
                    heads = "".join(f" {p + ' /s':>11} {'share':>6}" for p in POSITIONS)
                    print(f"{'batch':5}  {'measure':24}{heads}")
                print("\n".join(measure(ev, batch, args.seconds, searches)), flush=True)
            finally:
                ev.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
