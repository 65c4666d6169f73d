#!/usr/bin/env python3
"""Target quality: how often the raw policy's top move and the self-play target's top move at n
simulations agree with a judge's move, and how close the value targets (the game's result, the raw
value, the root value at n) come to the judge's evaluation, on positions the judge has scored.

The judge's rows come from `bin/rescore` (an hcpe per file: the judge's best move, its score as eval
on dlshogi's scale, the input game's result), e.g. gpsshogi at 1 s a position:

  bin/rescore --out runs/bench/m2/judge-fsf.hcpe --engine /usr/games/gpsusi --option Thread=1 \
      --byoyomi 1000 --positions 120 --shuffle 7 --parallel 1 models/heldout/fsf-200k.hcpe
  docs/experiments/2026-12-07-loop-measurements/target_quality.py runs/bench/m2/judge-fsf.hcpe \
      --sims 16,32,64,128,256,800

Each search is self-play's Gumbel search (engine.search.gumbel_tree, with the root's Gumbel noise,
16 actions considered, a 1-ply leaf mate probe), one per position and n, seeded by --seed; the target
is its improved policy, the top move the most probable under it. Values are the side to move's win
probability; the judge's is sigmoid(eval / 756). Printed: move agreement with the judge, the mean
squared distance of each value to the judge's, and its correlation.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-12-03-value-confidence"))  # its reader

import cshogi  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402
from value_calibration import boards_and_results  # noqa: E402

from bench.targets import parse_sims  # noqa: E402
from engine.backends.choose import create_evaluator  # noqa: E402
from engine.core.score import eval_to_value  # noqa: E402
from engine.errors import UserError, cli_main  # noqa: E402
from engine.search.eval_cache import EvalCache  # noqa: E402
from engine.search.gumbel_search import GumbelParams, search_position  # noqa: E402
from engine.search.gumbel_tree import TreeSearch  # noqa: E402
from train.data.readers import read_hcpe  # noqa: E402

MATE_EVAL = 3000  # a judge's score beyond this is a mate or a resignation: kept for moves, not values


def value_figures(v: np.ndarray, judge: np.ndarray) -> str:
    """Mean squared distance to the judge's value and the correlation with it."""
    mse = float(np.mean((v - judge) ** 2))
    corr = float(np.corrcoef(v, judge)[0, 1]) if np.std(v) > 0 and np.std(judge) > 0 else float("nan")
    return f"mse {mse:.4f}  corr {corr:+.3f}"


def measure(rows: np.ndarray, ev, sims: list[int], seed: int, progress: bool) -> dict:
    """Per position: the judge's move and value, the raw policy's top move and value, and for every n
    the target's top move and the root value."""
    boards, results = boards_and_results(rows)
    judge_move = rows["bestMove16"].astype(np.int64)
    out = {"raw": [], "raw_value": [], "result": results, "judge_value": eval_to_value(rows["eval"])}
    out.update({n: [] for n in sims})
    out.update({("value", n): [] for n in sims})
    logits, values = [], []
    for s in range(0, len(boards), 64):
        p, v = ev.evaluate_boards(boards[s : s + 64])
        logits.append(p[: len(boards[s : s + 64])])
        values.append(np.asarray(v).reshape(-1)[: len(boards[s : s + 64])])
    logits, values = np.concatenate(logits), np.concatenate(values)
    for i, board in enumerate(tqdm(boards, desc="positions", unit="pos", disable=not progress)):
        for n in sims:
            params = GumbelParams(sims=n, considered=16, leaf_mate_plies=1)
            rng = np.random.default_rng([seed, i, n])
            r = search_position(board, ev, params, rng, EvalCache(1 << 16), search_type=TreeSearch)
            moves16 = np.array([cshogi.move16(m) for m in r.moves])
            out[n].append(moves16[int(np.argmax(r.policy))] == judge_move[i])
            out[("value", n)].append(r.value)
            if n == sims[0]:
                top = moves16[int(np.argmax(logits[i][r.labels]))]
                out["raw"].append(top == judge_move[i])
                out["raw_value"].append(float(values[i]))
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


def report(figures: dict, evals: np.ndarray, sims: list[int]) -> list[str]:
    scored = np.abs(evals) < MATE_EVAL
    judge = figures["judge_value"][scored]
    lines = [
        f"positions {len(evals)} ({int(scored.sum())} scored under {MATE_EVAL} for the values)",
        f"{'source':>12}  {'agrees with judge':>18}  value vs judge",
        f"{'raw policy':>12}  {figures['raw'].mean():18.3f}  "
        + value_figures(figures["raw_value"][scored], judge),
    ]
    for n in sims:
        v = figures[("value", n)][scored]
        lines.append(f"{f'target n={n}':>12}  {figures[n].mean():18.3f}  {value_figures(v, judge)}")
    lines.append(f"{'game result':>12}  {'':18}  {value_figures(figures['result'][scored], judge)}")
    return lines


@cli_main("target_quality.py")
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("judged", nargs="+", help="hcpe files written by bin/rescore (the judge's rows)")
    p.add_argument("--model", help="checkpoint or ONNX (default: the shipped model)")
    p.add_argument("--sims", default="16,32,64,128,256,800", help="simulations, comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", dest="progress", action="store_false")
    a = p.parse_args(argv)
    sims = parse_sims(a.sims)
    rows = np.concatenate([read_hcpe(path) for path in a.judged])
    if not len(rows):
        raise UserError(f"{', '.join(a.judged)}: no positions")
    ev = create_evaluator(a.model, max_batch=64, threads=1, log=lambda _: None)
    try:
        figures = measure(rows, ev, sims, a.seed, a.progress)
    finally:
        ev.close()
    print("\n".join(report(figures, rows["eval"].astype(np.float64), sims)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
