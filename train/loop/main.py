"""The learning loop's entry: the same generations on this machine (train/loop/run.py) or with self-play
on a Ray cluster (train/loop/cluster.py), chosen here, above both, so neither imports the other's caller.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from engine.console import say
from train.loop.config import LoopConfig
from train.loop.run import run_local_loop


def run_loop(
    cfg: LoopConfig,
    log: Callable[[str], None] | None = None,
    on_step: Callable[[int, str], None] | None = None,
) -> list[dict[str, Any]]:
    """Run (or continue) generations 1..cfg.generations; returns all generations.jsonl rows.
    `on_step(g, step)` is called after each finished step (progress reporting; tests interrupt here).
    With `cfg.ray`, the generations run on that Ray cluster."""
    log = log or (lambda msg: say(msg, sys.stdout))
    if cfg.ray:
        from train.loop.cluster import run_cluster_loop  # Ray's modules only for a cluster run

        return run_cluster_loop(cfg, log, on_step)
    return run_local_loop(cfg, log, on_step)
