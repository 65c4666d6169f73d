"""The learning loop: self-play -> train on the newest window -> export -> evaluate, generation after
generation, resumable at every step.

Layout of a run folder:
    state.json                  finished steps per generation (atomic), the source of truth for resuming
    generations.jsonl           one line per evaluated generation (games, losses, Elo vs each opponent)
    strength.png                Elo over generations
    gen0000/model.pt, .onnx     the random-init network (a fixed reference opponent)
    genNNNN/selfplay/*.hcpe3    games played by generation N-1's model
    genNNNN/train/              the trainer's run (model.pt, checkpoint.pt, metrics.jsonl)
    genNNNN/model.onnx          the exported model (plus a TensorRT engine where TensorRT imports)
    genNNNN/eval/<opponent>/    one CSA file per evaluation game

An interrupted step resumes from what it left: self-play counts the whole games already in its folder
and plays only the rest; training continues its checkpoint; evaluation keeps finished matches. The run
folder's helpers here serve the cluster's loop too (train/loop/cluster.py); train/loop/main.py picks one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.core.network import build, load_model, preset, save_checkpoint
from engine.fileio import removed_if_refused
from train.loop.config import LoopConfig, LoopState, RunPaths
from train.loop.steps import export_model, step_eval, step_export, step_selfplay, step_train

STEPS = ("selfplay", "train", "export", "eval")


def generation_row(state: LoopState, g: int) -> dict[str, Any]:
    """The generations.jsonl line of generation g (needs its eval step finished)."""
    gen = state.generations[str(g)]
    prev_ladder = 0.0 if g == 1 else state.generations[str(g - 1)].get("ladder_elo")
    matches = gen["eval"]["matches"]
    row: dict[str, Any] = {
        "generation": g,
        "games": gen["selfplay"]["games"],
        "positions": gen["selfplay"]["positions"],
        "policy_loss": gen["train"].get("policy_loss"),
        "value_loss": gen["train"].get("value_loss"),
        "train_steps": gen["train"].get("steps"),
    }
    for key, m in matches.items():
        row[f"vs_{key}"] = {
            k: m[k] for k in ("wins", "losses", "draws", "score", "elo", "elo_error95", "los")
        }
    if "held_out" in gen["eval"]:
        row["held_out"] = gen["eval"]["held_out"]
    prev = matches.get("prev")
    row["ladder_elo"] = prev_ladder + prev["elo"] if prev and prev_ladder is not None else None
    errs = [
        state.generations[str(k)]["eval"]["matches"].get("prev", {}).get("elo_error95")
        for k in range(1, g + 1)
    ]
    row["ladder_error95"] = math.sqrt(sum(e * e for e in errs)) if all(e is not None for e in errs) else None
    row["seconds"] = {s: gen[s].get("seconds") for s in STEPS}
    return row


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append one whole line, unless this generation's line is already there (a rerun after a crash)."""
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                if json.loads(line).get("generation") == row["generation"]:
                    return
            except ValueError:
                continue
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def init_generation0(cfg: LoopConfig, paths: RunPaths, state: LoopState, log: Callable[[str], None]) -> None:
    """Generation 0: a random-init network, or the --init checkpoint plus a random-init reference of its
    architecture (so 'vs random' is measured either way)."""
    if state.done(0, "export"):
        return
    ckpt = paths.checkpoint(0)
    if cfg.init:
        net = load_model(cfg.init, cfg.activation)
        if not ckpt.exists():
            save_checkpoint(ckpt, net, generation=0, source=str(cfg.init))
            log(f"gen 0: {cfg.init} ({net.config.blocks}x{net.config.channels}) -> {ckpt}")
        if not paths.random_checkpoint.exists():
            save_checkpoint(paths.random_checkpoint, build(net.config, seed=cfg.seed), generation=0)
        export_model(paths.random_checkpoint, paths.random_onnx, cfg.eval_batch, log)
    elif not ckpt.exists():
        save_checkpoint(ckpt, build(preset(cfg.network), seed=cfg.seed), generation=0)
        log(f"gen 0: random-init '{cfg.network}' network (seed {cfg.seed}) -> {ckpt}")
    state.finish(0, "export", export_model(ckpt, paths.onnx(0), cfg.eval_batch, log))


def open_run(cfg: LoopConfig, log: Callable[[str], None]) -> tuple[LoopConfig, RunPaths, LoopState]:
    """Check the settings, create or reopen the run folder and make generation 0."""
    cfg.validate()
    paths = RunPaths(Path(cfg.dir))
    with removed_if_refused(paths.root):  # a new run refused at generation 0 (a bad --init) leaves no folder
        paths.root.mkdir(parents=True, exist_ok=True)
        state = LoopState.load(paths.state, cfg.network)
        if state.network != cfg.network:
            ignored = f"--network {cfg.network} ignored"
            log(f"note: {paths.root} was started with network '{state.network}'; {ignored}")
            cfg = dataclasses.replace(cfg, network=state.network)
        if not state.generations:
            state.save()
        init_generation0(cfg, paths, state, log)
    return cfg, paths, state


def record_generation(paths: RunPaths, state: LoopState, g: int, log: Callable[[str], None]) -> None:
    """Generation g's line in generations.jsonl and the redrawn plot, once."""
    from train.trainer.plot import plot_strength, read_jsonl

    if state.gen(g).get("recorded"):
        return
    row = generation_row(state, g)
    append_row(paths.jsonl, row)
    plot_strength(sorted(read_jsonl(paths.jsonl), key=_generation), paths.plot)
    state.gen(g).update(ladder_elo=row["ladder_elo"], recorded=True)
    state.save()
    log(f"gen {g}: " + ", ".join(f"{k} {v['elo']:+.0f}" for k, v in row.items() if k.startswith("vs_")))


def all_rows(paths: RunPaths) -> list[dict[str, Any]]:
    from train.trainer.plot import read_jsonl

    return sorted(read_jsonl(paths.jsonl), key=_generation)


def run_local_loop(
    cfg: LoopConfig, log: Callable[[str], None], on_step: Callable[[int, str], None] | None = None
) -> list[dict[str, Any]]:
    """Every step of generations 1..cfg.generations on this machine (`train.loop.main.run_loop` picks
    this or the cluster's loop); returns all generations.jsonl rows."""
    cfg, paths, state = open_run(cfg, log)
    for g in range(1, cfg.generations + 1):
        for step in STEPS:
            if state.done(g, step):
                continue
            if step == "selfplay":
                record = step_selfplay(cfg, paths, g, log)
            elif step == "train":
                record = step_train(cfg, paths, g, log)
            elif step == "export":
                record = step_export(cfg, paths, g, log)
            else:
                record = step_eval(cfg, paths, g, state, log)
            state.finish(g, step, record)
            if on_step is not None:
                on_step(g, step)
        record_generation(paths, state, g, log)
    return all_rows(paths)


def _generation(row: dict[str, Any]) -> int:
    return row["generation"]
