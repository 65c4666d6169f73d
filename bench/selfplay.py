#!/usr/bin/env python3
"""Self-play throughput (positions/s) against a seed-style baseline measured in the same run.

Ours: `run_selfplay` (many games per network call, two alternating groups, NN cache, exact batched
first visits). Baseline (the seed's design): one game at a time, one network call per simulation
(batch 1, no cache), the same Gumbel search otherwise. Both use the same evaluator and settings.

  python bench/selfplay.py                      # tiny and small nets on CPU, 32 sims (~3 min)
  python bench/selfplay.py --device cuda --parallel 256 --games 512
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cshogi  # noqa: E402
import numpy as np  # noqa: E402

from engine.backends.choose import create_evaluator  # noqa: E402
from engine.backends.evaluator import Evaluator  # noqa: E402
from engine.core.network import build, preset, save_checkpoint  # noqa: E402
from engine.core.rules import terminal  # noqa: E402
from engine.search import gumbel  # noqa: E402
from engine.search.gumbel_search import EvalCache, GumbelParams, GumbelSearch, LeafBatch  # noqa: E402
from engine.selfplay.config import SelfPlayConfig  # noqa: E402
from engine.selfplay.processes import run_selfplay  # noqa: E402


class SequentialSearch(GumbelSearch):
    """mctx's loop verbatim: one simulation, hence at most one network call, at a time."""

    def _round(self, root, seq, k, gumbel_noise, considered):
        actions = super()._round(root, seq, k, gumbel_noise, considered)
        if len(actions) == 1 or seq[k] == 0:  # at target 0 the first in g + logits order is mctx's pick
            return actions[:1]
        sig = self._sigma(root, root.q_hat())
        return [gumbel.select_root(gumbel_noise, root.logits, sig, root.N, considered, seq[k])]


def baseline(evaluator: Evaluator, params: GumbelParams, seconds: float, seed: int) -> tuple[int, float]:
    """Seed-style self-play for about `seconds`: returns (positions, elapsed)."""
    rng = np.random.default_rng(seed)
    batch = LeafBatch(1, evaluator.input2)
    search = SequentialSearch(params, EvalCache(0), batch)
    positions, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        board = cshogi.Board()
        while terminal(board, params.max_moves) is None and time.perf_counter() - start < seconds:
            steps = search.run(board, rng)
            while True:
                try:
                    next(steps)
                except StopIteration as done:
                    result = done.value
                    break
                batch.policy, batch.value = evaluator.evaluate_features(batch.x1[:1], batch.x2[:1])
                batch.clear()
            board.push(result.moves[result.choice])
            positions += 1
    return positions, time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nets", default="tiny,small")
    p.add_argument("--backend", default="auto")
    p.add_argument("--device", default=None)
    p.add_argument("--sims", type=int, default=32)
    p.add_argument("--parallel", type=int, default=64)
    p.add_argument("--games", type=int, default=64)
    p.add_argument("--max-moves", type=int, default=24, help="short games keep the bench short")
    p.add_argument("--groups", default="1,2", help="group counts to compare")
    p.add_argument("--processes", type=int, default=2, help="also run this many worker processes (0: skip)")
    p.add_argument("--baseline-seconds", type=float, default=10.0)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-selfplay-"))
    print(f"settings: sims {a.sims}, considered 16, parallel {a.parallel}, games {a.games}, "
          f"max moves {a.max_moves}, backend {a.backend}, device {a.device or 'default'}")  # fmt: skip
    for name in a.nets.split(","):
        model = tmp / f"{name}.pt"
        save_checkpoint(model, build(preset(name), seed=0))
        ev = create_evaluator(model, a.backend, max_batch=max(256, a.parallel), device=a.device)
        params = GumbelParams(sims=a.sims, max_moves=a.max_moves)
        n, secs = baseline(ev, params, a.baseline_seconds, seed=0)
        base = n / secs
        print(f"{name:6s} baseline (1 game, batch 1/sim, no cache) {base:8.1f} pos/s  ({n} pos, {secs:.1f}s)")
        for groups in map(int, a.groups.split(",")):
            config = SelfPlayConfig(
                out_dir=tmp / f"{name}-{groups}", games=a.games, parallel=a.parallel, groups=groups,
                sims=a.sims, max_moves=a.max_moves, progress=False, backend=a.backend, device=a.device,
            )  # fmt: skip
            s = run_selfplay(config, ev)
            rows_per_batch = s.nn_positions / max(s.nn_batches, 1)
            print(
                f"{name:6s} ours groups={groups} {s.pos_per_s:8.1f} pos/s  x{s.pos_per_s / base:5.1f}  "
                f"({s.positions} pos in {s.seconds:.1f}s, {rows_per_batch:.0f} rows/batch, "
                f"{s.nn_positions / max(s.positions, 1):.1f} NN rows/pos)"
            )
        ev.close()
        if a.processes > 1:
            config = SelfPlayConfig(
                out_dir=tmp / f"{name}-p", games=a.games, parallel=max(1, a.parallel // a.processes),
                processes=a.processes, sims=a.sims, max_moves=a.max_moves, progress=False,
                backend=a.backend, device=a.device, model=str(model),
            )  # fmt: skip
            s = run_selfplay(config)
            print(
                f"{name:6s} ours processes={a.processes} (groups=2, parallel {config.parallel} each) "
                f"{s.pos_per_s:8.1f} pos/s  x{s.pos_per_s / base:5.1f}  ({s.positions} pos, {s.seconds:.1f}s)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
