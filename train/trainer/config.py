"""A training run's settings (TrainConfig): their checks, the merge on --resume, the lr schedule."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import UserError

OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("cosine", "step", "constant")
AMP_MODES = ("auto", "off", "fp16", "bf16")
DEFAULT_LR = {"sgd": 0.1, "adam": 1e-3, "adamw": 1e-3}
DEFAULT_BATCH = 1024
SMALL_DATA_STEPS = 8  # data under one default batch: a batch size that gives this many steps an epoch
# Settings a resumed run may change; everything else comes from the run's saved config (the log and
# checkpoint intervals too: they decide which steps the metrics and checkpoints of the run fall on).
RUNTIME_FIELDS = (
    "workers",
    "device",
    "stop_after_steps",
    "eval_interval",
    "plot_interval",
    "tensorboard",
    "progress",
)


@dataclass
class TrainConfig:
    data: list[str] = field(default_factory=list)
    out: str = "run"
    network: str = "small"
    blocks: int | None = None  # overrides of the preset's size, for comparing nets of other sizes
    channels: int | None = None
    fcl: int | None = None
    nyugyoku_features: bool = False  # input2 with 119 planes
    init: str | None = None  # start from these weights (architecture from the checkpoint)
    activation: str | None = None  # relu|swish: of a new net, or of a dlshogi --init that does not say
    resume: bool = False  # continue RUN_DIR/checkpoint.pt
    epochs: int = 1
    batch_size: int | None = None  # global batch (all ranks, all accumulation steps); None: auto_batch_size
    accum_steps: int = 1
    optimizer: str = "sgd"
    lr: float | None = None  # None: DEFAULT_LR of the optimizer
    momentum: float = 0.9
    weight_decay: float = 1e-4
    schedule: str = "cosine"
    warmup_steps: int = 0
    min_lr_ratio: float = 0.0  # cosine ends at lr * this
    lr_step_epochs: int = 1  # step schedule: multiply by lr_gamma every this many epochs
    lr_gamma: float = 0.5
    clip_grad: float = 0.0  # max gradient norm, 0 = off
    ema: float = 0.0  # EMA decay of the weights, 0 = off; model.pt then holds the EMA weights
    amp: str = "auto"  # auto = fp16 on CUDA, off on CPU
    mirror: float = 0.0  # probability of a left-right mirrored position
    val_lambda: float = 0.0  # value loss = (1-l) BCE(result) + l BCE(stored eval)
    num_files: int | None = None  # newest files of each data folder
    test: list[str] = field(default_factory=list)
    test_limit: int | None = None  # evaluate on the first this many test positions
    cache_dir: str | None = None  # hcpe3 caches (default RUN_DIR/cache)
    hcpe3_average: bool = False
    hcpe3_temperature: float = 1.0
    seed: int = 0
    device: str | None = None
    workers: int = 2
    deterministic: bool = False
    log_interval: int = 100
    eval_interval: int = 0  # steps; 0 = at the end of each epoch only
    checkpoint_interval: int = 1000  # steps; also at each epoch end
    save_epochs: bool = False  # keep checkpoint-epochN.pt copies
    plot_interval: float = 30.0  # seconds between plot refreshes at log time
    stop_after_steps: int | None = None  # stop (with a checkpoint) after this many steps of this run
    tensorboard: bool = False
    progress: bool = True


def train_argv(cfg: TrainConfig) -> list[str]:
    """The bin/train flags that give back `cfg` (its non-default settings): how a library caller such as
    the learning loop runs the same training as a command, under torchrun."""
    default = TrainConfig()
    argv: list[str] = []
    for f in dataclasses.fields(TrainConfig):
        value = getattr(cfg, f.name)
        if value == getattr(default, f.name) and f.name != "out":  # bin/train needs --out said
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.name == "progress":
            argv.append("--no-progress")
        elif isinstance(value, bool):
            argv.append(flag)
        elif isinstance(value, list):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def _size_overrides(cfg: TrainConfig) -> dict[str, int | None]:
    return {"blocks": cfg.blocks, "channels": cfg.channels, "fcl": cfg.fcl}


def network_overrides(cfg: TrainConfig) -> dict[str, int]:
    """The --blocks/--channels/--fcl given, to apply on top of the --network preset."""
    return {k: v for k, v in _size_overrides(cfg).items() if v is not None}


def validate(cfg: TrainConfig) -> None:
    checks = [
        (cfg.epochs >= 1, f"--epochs must be >= 1, got {cfg.epochs}"),
        (cfg.batch_size is None or cfg.batch_size >= 1, f"--batch-size must be >= 1, got {cfg.batch_size}"),
        (cfg.accum_steps >= 1, f"--accum-steps must be >= 1, got {cfg.accum_steps}"),
        (cfg.optimizer in OPTIMIZERS, f"--optimizer must be one of {', '.join(OPTIMIZERS)}"),
        (cfg.schedule in SCHEDULES, f"--schedule must be one of {', '.join(SCHEDULES)}"),
        (cfg.amp in AMP_MODES, f"--amp must be one of {', '.join(AMP_MODES)}"),
        (cfg.lr is None or cfg.lr > 0, f"--lr must be > 0, got {cfg.lr}"),
        (0 <= cfg.mirror <= 1, f"--mirror must be a probability, got {cfg.mirror}"),
        (0 <= cfg.val_lambda <= 1, f"--val-lambda must be in [0, 1], got {cfg.val_lambda}"),
        (0 <= cfg.ema < 1, f"--ema must be in [0, 1), got {cfg.ema}"),
        (cfg.clip_grad >= 0, f"--clip-grad must be >= 0, got {cfg.clip_grad}"),
        (cfg.warmup_steps >= 0, f"--warmup-steps must be >= 0, got {cfg.warmup_steps}"),
        (cfg.workers >= 0, f"--workers must be >= 0, got {cfg.workers}"),
        (cfg.log_interval >= 1, f"--log-interval must be >= 1, got {cfg.log_interval}"),
        (cfg.lr_step_epochs >= 1, f"--lr-step-epochs must be >= 1, got {cfg.lr_step_epochs}"),
        (cfg.test_limit is None or cfg.test_limit >= 1, "--test-limit must be >= 1"),
        (cfg.resume or bool(cfg.data), "no --data given"),
        *((v is None or v >= 1, f"--{n} must be >= 1, got {v}") for n, v in _size_overrides(cfg).items()),
    ]
    for ok, message in checks:
        if not ok:
            raise UserError(message)


def auto_batch_size(positions: int, divisor: int) -> int:
    """The batch when --batch-size is not given: DEFAULT_BATCH, or for data smaller than that (a first
    run on a few self-play games) the largest power of two that still gives SMALL_DATA_STEPS steps an
    epoch; a multiple of `divisor` (processes x accumulation steps) either way."""
    batch = DEFAULT_BATCH
    if positions < DEFAULT_BATCH:
        batch = 1 << max(0, (positions // SMALL_DATA_STEPS).bit_length() - 1)
    return max(divisor, batch // divisor * divisor)


def lr_factor(step: int, cfg: TrainConfig, total_steps: int, steps_per_epoch: int) -> float:
    """Multiplier of the base learning rate before optimizer step `step` (0-based)."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    if cfg.schedule == "step":
        return cfg.lr_gamma ** (step // (steps_per_epoch * cfg.lr_step_epochs))
    span = max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def resumed_config(cfg: TrainConfig, payload: dict[str, Any], log: Callable[[str], None]) -> TrainConfig:
    """The run's saved settings, with this invocation's runtime settings on top (the rest, data
    included, must stay as they were for the resumed run to be the run that was started)."""
    saved = payload.get("train_config")
    if not isinstance(saved, dict):
        raise UserError(f"{Path(cfg.out) / 'checkpoint.pt'}: not a training checkpoint (no train_config)")
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    merged = TrainConfig(**{k: v for k, v in saved.items() if k in known})
    for name in (*RUNTIME_FIELDS, "out"):
        setattr(merged, name, getattr(cfg, name))
    merged.resume = True
    for name in ("log_interval", "checkpoint_interval"):
        given, kept = getattr(cfg, name), getattr(merged, name)
        if given != kept and given != getattr(TrainConfig, name):
            log(f"note: --resume keeps the run's --{name.replace('_', '-')} {kept}; {given} is ignored")
    if cfg.data and [str(p) for p in cfg.data] != list(saved.get("data", [])):
        log("note: --resume uses the run's saved data files; the --data given now is ignored")
    return merged
