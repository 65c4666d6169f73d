#!/usr/bin/env python3
"""Self-play targets, measured: what the Gumbel search's policy and value targets look like under each
target setting and number of simulations, next to the network's own prior (the baseline row), and how
close they come to a judge stronger than the search.

Positions: an hcpe of whole games in order (`bin/convert csa-to-hcpe` of the engine's games; each row's
bestMove16 is the move played, gameResult the game's result). The judge: an hcpe from `bin/rescore`
over the same positions (its best move and score), e.g. the engine itself at 10 s a position:

  bin/match bin/usi_engine bin/usi_engine --byoyomi 1000 --games 8 --random-plies 6 --csa games/
  bin/convert csa-to-hcpe games/ -o games.hcpe
  bin/rescore --out judge.hcpe --engine bin/usi_engine --option Threads=1 --byoyomi 10000 \\
      --parallel 1 games.hcpe
  bench/targets.py games.hcpe --judge judge.hcpe --sims 32,64,128,400

Policy columns, means over positions: the largest share, the entropy (nats), KL(target || prior), the
share of positions whose most likely move is not the prior's, then over the judged positions the share
whose most likely move is the judge's and the cross-entropy -log target(judge's move) (floored at
1e-6). Value columns: v(t) + v(t + 1) over consecutive positions of a game (each the mover's win
probability: consistent values sum to about 1) and the share of pairs below 1, the mean squared
error against the judge's value (sigmoid(score / 756), scores under 3000) and against the game's
result. Every setting searches each position with the same Gumbel noise (seeded by position), so
rows differ by their targets alone; one search gives a setting's two policy targets and three values.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cshogi  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from engine.backends.choose import create_evaluator  # noqa: E402
from engine.core.score import eval_to_value  # noqa: E402
from engine.errors import UserError, cli_main  # noqa: E402
from engine.search import gumbel  # noqa: E402
from engine.search.eval_cache import EvalCache  # noqa: E402
from engine.search.gumbel_search import GumbelParams, search_position  # noqa: E402
from engine.search.gumbel_tree import TreeSearch  # noqa: E402
from train.data.readers import read_hcpe  # noqa: E402

MATE_SCORE = 3000  # a judge's score beyond this is a mate or a resignation: kept for moves, not values
CE_FLOOR = 1e-6
# named target settings (docs/selfplay.md): sigma's c_scale and its q transform
SETTINGS = {
    "sharp": (1.0, "minmax"),  # c_scale 1 over min-max rescaled Q: the old self-play default
    "mctx": (0.1, "minmax"),  # mctx's and gumbel-dlshogi's default
    "absolute": (1.0, "absolute"),  # the Gumbel MuZero paper's: no rescale, c_scale 1
    "absolute-0.3": (0.3, "absolute"),
}


@dataclass
class Position:
    board: cshogi.Board
    played: int  # move16 played in the game
    result: float  # the game's result for the side to move
    judge_move: int | None
    judge_value: float | None  # None: no judge row, or a mate score
    follows: bool  # the previous row is this game's previous position


def load_positions(games_path: str, judge_path: str | None) -> list[Position]:
    rows = read_hcpe(games_path)
    if not len(rows):
        raise UserError(f"{games_path}: no positions")
    judged: dict[bytes, tuple[int, int]] = {}
    if judge_path:
        for r in read_hcpe(judge_path):
            judged[r["hcp"].tobytes()] = (int(r["bestMove16"]), int(r["eval"]))
    out: list[Position] = []
    before: cshogi.Board | None = None
    for r in rows:
        board = cshogi.Board()
        board.set_hcp(r["hcp"])
        follows = False
        if before is not None:
            key = board.zobrist_hash()
            move = before.move_from_move16(int(out[-1].played))
            if before.is_legal(move):
                before.push(move)
                follows = before.zobrist_hash() == key
        winner = int(r["gameResult"])
        result = 0.5 if winner == 0 else float((winner == 1) == (board.turn == cshogi.BLACK))
        move, score = judged.get(r["hcp"].tobytes(), (None, None))
        value = None if score is None or abs(score) >= MATE_SCORE else float(eval_to_value(np.array(score)))
        out.append(Position(board, int(r["bestMove16"]), result, move, value, follows))
        before = board.copy()
    return out


def entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def kl(target: np.ndarray, prior: np.ndarray) -> float:
    keep = target > 0
    return float((target[keep] * np.log(target[keep] / prior[keep])).sum())


def policy_row(targets: list[np.ndarray], priors: list[np.ndarray], judge_index: list[int | None]) -> dict:
    """The policy columns of one row (targets and priors over each position's legal moves)."""
    judged = [(t, j) for t, j in zip(targets, judge_index, strict=True) if j is not None]
    return {
        "max": np.mean([t.max() for t in targets]),
        "entropy": np.mean([entropy(t) for t in targets]),
        "kl": np.mean([kl(t, p) for t, p in zip(targets, priors, strict=True)]),
        "differs": np.mean([t.argmax() != p.argmax() for t, p in zip(targets, priors, strict=True)]),
        "agree": np.mean([t.argmax() == j for t, j in judged]) if judged else float("nan"),
        "ce": np.mean([-np.log(max(t[j], CE_FLOOR)) for t, j in judged]) if judged else float("nan"),
    }


def value_row(values: np.ndarray, positions: list[Position]) -> dict:
    """The value columns of one row."""
    pairs = np.array([values[i - 1] + values[i] for i, p in enumerate(positions) if p.follows])
    judged = [(v, p.judge_value) for v, p in zip(values, positions, strict=True) if p.judge_value is not None]
    results = np.array([p.result for p in positions])
    return {
        "pair": pairs.mean() if len(pairs) else float("nan"),
        "below": (pairs < 1).mean() if len(pairs) else float("nan"),
        "judge": np.mean([(v - j) ** 2 for v, j in judged]) if judged else float("nan"),
        "result": float(np.mean((values - results) ** 2)),
    }


def measure(positions: list[Position], ev, settings: list[str], sims: list[int], seed: int, progress: bool):
    """Every position searched once per setting and n; returns (policy rows, value rows)."""
    n_pos = len(positions)
    priors, v_net, judge_index = [], np.empty(n_pos), []
    targets = {(s, n, k): [] for s in settings for n in sims for k in gumbel.POLICY_TARGETS}
    values = {(s, n, k): np.empty(n_pos) for s in settings for n in sims for k in gumbel.VALUE_TARGETS}
    bar = tqdm(positions, desc="positions", unit="pos", disable=not progress)
    for i, pos in enumerate(bar):
        cache = EvalCache(1 << 16)  # shared by the position's searches: the same leaves are evaluated once
        for s in settings:
            c_scale, transform = setting(s)
            for n in sims:
                params = GumbelParams(sims=n, c_scale=c_scale, rescale=transform == "minmax", root_lines=True)
                rng = np.random.default_rng([seed, i])
                r = search_position(pos.board, ev, params, rng, cache, search_type=TreeSearch)
                if len(r.moves) == 1:
                    r.visits, r.q = np.array([n]), np.array([r.value])
                if not priors or len(priors) == i:
                    logits, v = cache.get(pos.board.zobrist_hash())[1:]
                    priors.append(gumbel.softmax(logits))
                    v_net[i] = v
                    moves16 = [cshogi.move16(m) for m in r.moves]
                    judge_index.append(moves16.index(pos.judge_move) if pos.judge_move in moves16 else None)
                targets[(s, n, "improved")].append(r.policy)
                targets[(s, n, "visits")].append(gumbel.visit_policy(r.visits))
                for k in gumbel.VALUE_TARGETS:
                    values[(s, n, k)][i] = gumbel.root_value(
                        k, r.q, r.visits, priors[i], v_net[i], r.policy, r.choice
                    )
    policy = {("network prior", 0, ""): policy_row(priors, priors, judge_index)}
    policy.update({key: policy_row(t, priors, judge_index) for key, t in targets.items()})
    value = {("network value", 0, ""): value_row(v_net, positions)}
    value.update({key: value_row(v, positions) for key, v in values.items()})
    return policy, value


def setting(name: str) -> tuple[float, str]:
    """A named setting, or SCALE:TRANSFORM (e.g. 0.3:absolute)."""
    if name in SETTINGS:
        return SETTINGS[name]
    scale, _, transform = name.partition(":")
    try:
        c_scale = float(scale)
    except ValueError:
        c_scale = -1.0
    if c_scale < 0 or transform not in gumbel.Q_TRANSFORMS:
        known = ", ".join(SETTINGS)
        raise UserError(
            f"--settings: {name!r} is neither a named setting ({known}) nor SCALE:minmax|absolute"
        )
    return c_scale, transform


def parse_sims(text: str) -> list[int]:
    """`32,64,128` -> sorted simulation counts (each >= 2)."""
    try:
        sims = sorted(int(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"--sims: cannot read {text!r}") from None
    if not sims or sims[0] < 2:
        raise UserError("--sims: give simulations >= 2")
    return sims


def table(policy: dict, value: dict, default: tuple[str, str, str]) -> list[str]:
    """The two tables; the row of today's default settings is marked with *."""

    def mark(s: str, k: str) -> str:
        return "*" if s == default[0] and k in default[1:] else " "

    lines = [f"{'setting':>14} {'n':>4} {'policy':>9}   max   entropy    KL  differs  judge  CE(judge)"]
    for (s, n, k), r in policy.items():
        lines.append(
            f"{s:>14} {n or '':>4} {k:>8}{mark(s, k)}  {r['max']:.3f}  {r['entropy']:6.3f}  {r['kl']:5.3f}"
            f"  {r['differs']:6.3f}  {r['agree']:5.3f}  {r['ce']:8.3f}"
        )
    lines += ["", f"{'setting':>14} {'n':>4} {'value':>9}  v(t)+v(t+1)  below 1  MSE judge  MSE result"]
    for (s, n, k), r in value.items():
        lines.append(
            f"{s:>14} {n or '':>4} {k:>8}{mark(s, k)}  {r['pair']:11.3f}  {r['below']:7.3f}"
            f"  {r['judge']:9.4f}  {r['result']:10.4f}"
        )
    return lines


@cli_main("bench/targets.py")
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("games", help="hcpe of whole games in order (bin/convert csa-to-hcpe)")
    p.add_argument("--judge", help="hcpe from bin/rescore over the same positions")
    p.add_argument("--model", help="checkpoint or ONNX (default: the shipped model)")
    p.add_argument("--int8", action="store_true", help="the network quantized to int8, as self-play --int8")
    p.add_argument("--settings", default="sharp,mctx,absolute", help="named settings or SCALE:TRANSFORM")
    p.add_argument("--sims", default="32,64,128,400", help="simulations, comma-separated")
    p.add_argument("--positions", type=int, default=0, help="only the first N positions (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", dest="progress", action="store_false")
    a = p.parse_args(argv)
    sims = parse_sims(a.sims)
    settings = [s.strip() for s in a.settings.split(",") if s.strip()]
    for s in settings:
        setting(s)
    for path in (a.games, a.judge):
        if path and not Path(path).is_file():
            raise UserError(f"{path}: no such file")
    positions = load_positions(a.games, a.judge)
    if a.positions:
        positions = positions[: a.positions]
    ev = create_evaluator(a.model, max_batch=64, threads=1, int8=a.int8, log=lambda _: None)
    try:
        policy, value = measure(positions, ev, settings, sims, a.seed, a.progress)
    finally:
        ev.close()
    judged = sum(p.judge_move is not None for p in positions)
    pairs = sum(p.follows for p in positions)
    print(
        f"positions {len(positions)}, judged {judged}, consecutive pairs {pairs}; * = the self-play default"
    )
    today = (gumbel.C_SCALE, "minmax" if gumbel.RESCALE else "absolute")
    default = next((s for s in settings if setting(s) == today), "")
    d = GumbelParams()
    print("\n".join(table(policy, value, (default, d.policy_target, d.value_target))), flush=True)


if __name__ == "__main__":
    sys.exit(main())
