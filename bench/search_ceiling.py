#!/usr/bin/env python3
"""The search's own ceiling: self-play and the USI PUCT search with a network that costs nothing
(engine.backends.evaluator.UniformEvaluator), so only tree work, cshogi's board work and feature
building remain.

Each figure is printed next to the same run's figure for a reference checkout (default ../ref beside
this checkout; make it with `git worktree add ../ref 4189646`, the commit before the array trees): both
run in child processes (PYTHONPATH = the checkout), alternated, best of --repeat.
Usage: bench/search_ceiling.py [--ref DIR] [--repeat N] [--games G] [--sims S] [--max-moves M]
[--playouts P] [--batch B]; --profile {ours,ref} prints a cProfile of null self-play.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
# the USI search's positions (bench/nps.py times the same two): (sfen, moves)
POSITIONS = {
    "startpos": ("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1", []),
    "middle": ("ln3g1nl/1g4sk1/p1p1Pp1pp/1p2p4/3ps4/+B1P6/PPSP1PPPP/3KG4/LN3GSNL b Rrbp 51", []),
}


def _uniform_evaluator(max_batch: int):
    """Our UniformEvaluator, loaded from this checkout's file whichever `engine` package is imported
    (the reference predates it; the searches only use the Evaluator interface)."""
    path = ROOT / "engine" / "backends" / "evaluator.py"
    spec = importlib.util.spec_from_file_location("_bench_evaluator", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.UniformEvaluator(max_batch)


def _ours() -> bool:
    """Whether the `engine` package imported is this checkout's (the editable install would also
    serve modules the reference lacks from here, so the reference must not ask for them)."""
    import engine

    return Path(engine.__file__).resolve().parent == ROOT / "engine"


def _module(name: str, old_name: str) -> ModuleType:
    """A module by its name in this layout, or in the reference's (before engine/ had subpackages)."""
    return importlib.import_module(name if _ours() else old_name)


def selfplay_figures(games: int, sims: int, max_moves: int) -> dict[str, float]:
    SelfPlayConfig = _module("engine.selfplay.config", "engine.selfplay").SelfPlayConfig
    run_selfplay = _module("engine.selfplay.processes", "engine.selfplay").run_selfplay

    if _ours():  # load the compiled kernels before the clock starts (a one-time cost per process)
        from engine.core.features import FEATURES2_NUM
        from engine.search.gumbel_tree import warm_up

        warm_up(FEATURES2_NUM)

    with tempfile.TemporaryDirectory() as out:
        config = SelfPlayConfig(
            out_dir=out, games=games, parallel=games, sims=sims, max_moves=max_moves, progress=False
        )
        stats = run_selfplay(config, evaluator=_uniform_evaluator(config.batch))
    lookups = stats.cache_hits + stats.nn_positions
    return {
        "selfplay rows/s": stats.nn_positions / stats.seconds,
        "selfplay positions/s": stats.positions / stats.seconds,
        "selfplay sims/s": stats.positions * sims / stats.seconds,
        "selfplay rows/call": stats.nn_positions / max(stats.nn_batches, 1),
        "selfplay cache hit %": 100.0 * stats.cache_hits / max(lookups, 1),
    }


def playout_rates(search_type, params_type, control_type, ev, batch: int, playouts: int) -> dict[str, float]:
    """PUCT playouts/s from each of POSITIONS, the root evaluated before the clock starts; the classes are
    arguments so that either checkout's can be measured."""
    out = {}
    for name, (sfen, moves) in POSITIONS.items():
        search = search_type(ev, params_type(), batch_size=batch)
        search.set_position(sfen, moves)
        search.evaluate_root()
        start = time.perf_counter()
        result = search.run(control_type(max_playouts=playouts))
        out[name] = result.playouts / (time.perf_counter() - start)
    return out


def puct_figures(playouts: int, batch: int) -> dict[str, float]:
    puct = _module("engine.search.puct", "engine.puct")
    Search, SearchControl = puct.Search, puct.SearchControl
    SearchParams = getattr(puct, "PuctParams", None) or puct.SearchParams  # the reference's name

    if _ours():
        from engine.search.puct_tree import FastSearch as Search

    rates = playout_rates(Search, SearchParams, SearchControl, _uniform_evaluator(batch), batch, playouts)
    return {f"puct {name} playouts/s": rate for name, rate in rates.items()}


def measure(args: argparse.Namespace) -> dict[str, float]:
    figures = selfplay_figures(args.games, args.sims, args.max_moves)
    figures.update(puct_figures(args.playouts, args.batch))
    return figures


def profile(args: argparse.Namespace) -> None:
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    selfplay_figures(args.games, args.sims, args.max_moves)
    prof.disable()
    pstats.Stats(prof).sort_stats(args.sort).print_stats(15)


def run_child(checkout: Path, args: argparse.Namespace, extra: list[str]) -> str:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    cmd = [sys.executable, str(Path(__file__).resolve()), *extra]
    cmd += ["--games", str(args.games), "--sims", str(args.sims), "--max-moves", str(args.max_moves)]
    cmd += ["--playouts", str(args.playouts), "--batch", str(args.batch)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=checkout)
    if done.returncode:
        raise SystemExit(f"search_ceiling: {checkout} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", type=Path, default=ROOT.parent / "ref", help="reference checkout (see above)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per side (best of)")
    ap.add_argument("--games", type=int, default=64)
    ap.add_argument("--sims", type=int, default=32)
    ap.add_argument("--max-moves", type=int, default=80, help="plies per game (short games keep it quick)")
    ap.add_argument("--playouts", type=int, default=20000, help="PUCT playouts per position")
    ap.add_argument("--batch", type=int, default=32, help="PUCT batch size")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--profile", choices=("ours", "ref"), help="cProfile null self-play of one side")
    ap.add_argument("--sort", default="tottime", help="cProfile sort key for --profile")
    ap.add_argument("--profile-here", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    needs_ref = not (args.child or args.profile_here or args.profile == "ours")
    if needs_ref and not (args.ref / "engine").is_dir():
        ap.error(f"--ref {args.ref}: not a checkout (make one: git worktree add {args.ref} 4189646)")
    if args.child:
        print(json.dumps(measure(args)))
        return 0
    if args.profile_here:
        profile(args)
        return 0
    if args.profile:
        side = ROOT if args.profile == "ours" else args.ref
        print(run_child(side, args, ["--profile-here", "--sort", args.sort]))
        return 0
    best: dict[str, dict[str, float]] = {"ours": {}, "ref": {}}
    for _ in range(args.repeat):
        for side, checkout in (("ref", args.ref), ("ours", ROOT)):
            for key, value in json.loads(run_child(checkout, args, ["--child"])).items():
                rate = key.endswith("/s")  # rates: best of; the others do not depend on speed
                best[side][key] = max(value, best[side].get(key, value)) if rate else value
    print(
        f"zero-cost evaluator; {args.games} games x {args.sims} sims, max {args.max_moves} plies; "
        f"PUCT batch {args.batch}, {args.playouts} playouts; best of {args.repeat}"
    )
    print(f"{'measure':30} {'ours':>10} {'reference':>10} {'ratio':>7}")
    for key, ours in best["ours"].items():
        ref = best["ref"].get(key, float("nan"))
        print(f"{key:30} {ours:10.1f} {ref:10.1f} {ours / ref if ref else float('nan'):7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
