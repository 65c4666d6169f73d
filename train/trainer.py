"""The training loop: policy cross-entropy on distributions + value BCE, with exact resume and DDP.

Everything that decides the result is a function of the saved state: data order comes from
(seed, epoch) and the batch index, mirror flips from (seed, epoch, batch, chunk), so a run stopped
at any step and resumed reaches the same weights as one that never stopped. Under torchrun each rank
takes its chunks of every global batch and DDP averages gradients; losses are normalised by global
counts, so N ranks x B/N positions compute the same gradient as 1 rank accumulating N chunks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from tqdm import tqdm

from engine.core.features import FEATURES2_NUM, FEATURES2_NYUGYOKU_NUM, ensure_features2
from engine.core.network import (
    PolicyValueNetwork,
    build,
    load_model,
    network_from_payload,
    preset,
    read_checkpoint,
    save_checkpoint,
)
from engine.errors import UserError
from engine.fileio import atomic_write_text, check_output_dir
from train.dataset import (
    Batch,
    BatchDataset,
    EpochBatches,
    SequentialBatches,
    hcpe3_cache_for,
    make_loader,
    open_corpus,
    plan_sources,
    resolve_inputs,
    to_device,
)
from train.plot import plot_file

OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("cosine", "step", "constant")
AMP_MODES = ("auto", "off", "fp16", "bf16")
DEFAULT_LR = {"sgd": 0.1, "adam": 1e-3, "adamw": 1e-3}
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
    nyugyoku_features: bool = False  # input2 with 119 planes
    init: str | None = None  # start from these weights (architecture from the checkpoint)
    activation: str | None = None  # relu|swish: of a new net, or of a dlshogi --init that does not say
    resume: bool = False  # continue RUN_DIR/checkpoint.pt
    epochs: int = 1
    batch_size: int = 1024  # global batch (all ranks, all accumulation steps)
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
    stop_after_steps: int | None = None  # stop (with a checkpoint) after this many steps this session
    tensorboard: bool = False
    progress: bool = True


# ---------------------------------------------------------------------------------------------------
# Pure pieces: validation, learning rate, losses.


def validate(cfg: TrainConfig) -> None:
    checks = [
        (cfg.epochs >= 1, f"--epochs must be >= 1, got {cfg.epochs}"),
        (cfg.batch_size >= 1, f"--batch-size must be >= 1, got {cfg.batch_size}"),
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
    ]
    for ok, message in checks:
        if not ok:
            raise UserError(message)


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


def policy_loss_sum(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum over rows of the cross-entropy to the (normalised) target distribution; empty rows add 0."""
    target = target / target.sum(1, keepdim=True).clamp_min(1e-12)
    return -(target * F.log_softmax(logits.float(), 1)).sum()


def value_loss_sum(
    logit: torch.Tensor, result: torch.Tensor, value: torch.Tensor, val_lambda: float
) -> torch.Tensor:
    """Sum over rows of (1-l) BCE(result) + l BCE(stored value), as dlshogi's --val_lambda."""
    logit = logit.float().reshape(-1)
    loss = F.binary_cross_entropy_with_logits(logit, result, reduction="sum")
    if val_lambda:
        loss = (1 - val_lambda) * loss + val_lambda * F.binary_cross_entropy_with_logits(
            logit, value, reduction="sum"
        )
    return loss


def has_policy(policy: torch.Tensor) -> torch.Tensor:
    return policy.sum(1) > 0


# ---------------------------------------------------------------------------------------------------
# Process setup.


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device_pref: str | None) -> Dist:
    """torchrun sets WORLD_SIZE/RANK/LOCAL_RANK; NCCL on GPU, gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    d = Dist(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        use_cuda = torch.cuda.is_available() and not (device_pref or "").startswith("cpu")
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(hours=2))
    return d


def pick_device(pref: str | None, d: Dist) -> torch.device:
    if pref:
        try:
            device = torch.device(pref)
        except RuntimeError:
            raise UserError(f"--device {pref!r} is not a torch device (cpu, cuda, cuda:1, ...)") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise UserError(f"--device {pref}: CUDA is not available on this machine")
        if device.type == "cuda" and d.enabled and device.index is None:
            device = torch.device("cuda", d.local_rank)
        return device
    return torch.device("cuda", d.local_rank) if torch.cuda.is_available() else torch.device("cpu")


def amp_dtype(mode: str, device: torch.device) -> torch.dtype | None:
    if mode == "auto":
        return torch.float16 if device.type == "cuda" else None
    if mode == "off":
        return None
    if mode == "fp16" and device.type != "cuda":
        raise UserError("--amp fp16 needs a CUDA device (use bf16 or off on CPU)")
    return torch.float16 if mode == "fp16" else torch.bfloat16


class StopFlag:
    """SIGINT/SIGTERM ask the loop to checkpoint and stop after the current step; a second Ctrl-C kills."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopFlag:
        if _in_main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        print(f"\nsignal {signum}: stopping after this step and saving a checkpoint", file=sys.stderr)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


# ---------------------------------------------------------------------------------------------------
# Model, optimizer, state.


def make_network(cfg: TrainConfig, log: Callable[[str], None]) -> PolicyValueNetwork:
    planes2 = FEATURES2_NYUGYOKU_NUM if cfg.nyugyoku_features else FEATURES2_NUM
    if cfg.init:
        net = load_model(cfg.init, cfg.activation)
        log(f"initial weights from {cfg.init} ({net.config})")
        return net.train()
    act = {"activation": cfg.activation} if cfg.activation else {}
    return build(preset(cfg.network, input2=planes2, **act), seed=cfg.seed).train()


def make_optimizer(net: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Weight decay on conv/linear weights only (not on BatchNorm or biases)."""
    decay = [p for p in net.parameters() if p.ndim > 1]
    rest = [p for p in net.parameters() if p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    lr = cfg.lr or DEFAULT_LR[cfg.optimizer]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum, nesterov=cfg.momentum > 0)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(groups, lr=lr)
    return torch.optim.AdamW(groups, lr=lr)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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


# ---------------------------------------------------------------------------------------------------
# Metrics.


class MetricsLog:
    """metrics.jsonl (one JSON object a line, appended and flushed), the PNG plot and TensorBoard."""

    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool, plot_interval: float) -> None:
        self.enabled = enabled
        self.jsonl = run_dir / "metrics.jsonl"
        self.png = run_dir / "metrics.png"
        self.plot_interval = plot_interval
        self._last_plot = 0.0
        self._tb = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise UserError("--tensorboard: the tensorboard package is not installed") from None
            self._tb = SummaryWriter(str(run_dir / "tensorboard"))

    def drop_after(self, step: int) -> None:
        """Keep only the rows up to `step` (a resumed run's checkpoint): the rows logged after it are
        logged again by the resumed run. A row cut off by a kill goes too. Rewritten atomically."""
        if not (self.enabled and self.jsonl.exists()):
            return
        kept = []
        for line in self.jsonl.read_text().splitlines(keepends=True):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if line.endswith("\n") and isinstance(row, dict) and row.get("step", step + 1) <= step:
                kept.append(line)
        atomic_write_text(self.jsonl, "".join(kept))

    def write(self, row: dict[str, Any], plot: bool = False) -> None:
        if not self.enabled:
            return
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for k, v in row.items():
                if k not in ("step", "epoch") and isinstance(v, int | float):
                    self._tb.add_scalar(k, v, row["step"])
        if plot or time.monotonic() - self._last_plot >= self.plot_interval:
            self.plot()

    def plot(self) -> None:
        if self.enabled:
            plot_file(self.jsonl, self.png)
            self._last_plot = time.monotonic()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


@torch.no_grad()
def evaluate(
    net: nn.Module, loader: Iterable[Batch], device: torch.device, dtype: torch.dtype | None
) -> dict[str, float]:
    """Test losses and accuracies: policy top-1 against the target's argmax (rows with a policy);
    value sign against the result on decisive positions (a draw has no right side of 0.5)."""
    was_training = net.training
    net.eval()
    sums = torch.zeros(7, dtype=torch.float64, device=device)
    for batch in loader:
        b = to_device(batch, device)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            logits, v = net(b.x1, b.x2)
        v = v.float().reshape(-1)
        mask = has_policy(b.policy)
        decisive = b.result != 0.5
        sums += torch.stack(
            [
                policy_loss_sum(logits, b.policy),
                mask.sum(),
                ((logits.argmax(1) == b.policy.argmax(1)) & mask).sum(),
                F.binary_cross_entropy_with_logits(v, b.result, reduction="sum"),
                torch.tensor(len(v), device=device),
                (((v > 0) == (b.result > 0.5)) & decisive).sum(),
                decisive.sum(),
            ]
        ).double()
    net.train(was_training)
    p_loss, p_rows, p_hit, v_loss, rows, v_hit, decisive_rows = sums.tolist()
    return {
        "test_policy_loss": p_loss / max(p_rows, 1),
        "test_value_loss": v_loss / max(rows, 1),
        "test_policy_acc": p_hit / max(p_rows, 1),
        "test_value_acc": v_hit / max(decisive_rows, 1),
        "test_positions": int(rows),
    }


def make_test_loader(
    test: Sequence[str],
    cache_dir: Path,
    planes2: int,
    batch_size: int,
    limit: int | None = None,
    workers: int = 0,
    pin: bool = False,
    log: Callable[[str], None] = print,
) -> Iterable[Batch]:
    """Held-out records in order (hcpe3 through a cache in `cache_dir`), for `evaluate`."""
    direct, hcpe3 = plan_sources(resolve_inputs(test))
    caches = [hcpe3_cache_for(hcpe3, cache_dir, log=log, progress=False)] if hcpe3 else []
    corpus = open_corpus(direct, caches, planes2)
    if not len(corpus):
        raise UserError(f"--test {' '.join(map(str, test))}: no positions")
    return make_loader(BatchDataset(corpus), SequentialBatches(len(corpus), batch_size, limit), workers, pin)


def evaluate_checkpoint(
    model: str | Path, test: Sequence[str], cache_dir: Path, batch_size: int = 256, device: str | None = None
) -> dict[str, float]:
    """A saved model's held-out losses and accuracies (the loop measures each generation this way on
    an engine's games: a strength signal that needs no match)."""
    net = load_model(model)
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    loader = make_test_loader(test, cache_dir, net.config.input2, batch_size, log=lambda _msg: None)
    return evaluate(net.to(dev), loader, dev, None)


# ---------------------------------------------------------------------------------------------------
# The loop.


def _log_main(d: Dist) -> Callable[[str], None]:
    def log(msg: str) -> None:
        if d.main:
            tqdm.write(msg, file=sys.stderr)

    return log


def _prepare_sources(
    files: list[Path], cache_dir: Path, cfg: TrainConfig, d: Dist, log: Callable[[str], None]
) -> tuple[list[tuple[str, Path]], list[Path]]:
    """Detect formats; rank 0 builds the hcpe3 cache (if any) while the other ranks wait."""
    direct, hcpe3 = plan_sources(files)
    if not hcpe3:
        return direct, []

    def cache() -> list[Path]:
        options = (cfg.hcpe3_average, cfg.hcpe3_temperature, log, cfg.progress)
        return [hcpe3_cache_for(hcpe3, cache_dir, *options)]

    caches = cache() if d.main else []
    if d.enabled:
        dist.barrier()
    return direct, caches if d.main else cache()


def _all_sum(t: torch.Tensor, d: Dist) -> torch.Tensor:
    if d.enabled:
        dist.all_reduce(t)
    return t


def train(config: TrainConfig) -> dict[str, Any]:
    """Train as configured; returns a summary (steps, last losses, last test metrics, paths)."""
    validate(config)
    run_dir = check_output_dir(config.out, "--out")  # created once the inputs are known to be good
    d = init_distributed(config.device)
    log = _log_main(d)
    ckpt_path = run_dir / "checkpoint.pt"
    payload: dict[str, Any] | None = None
    if config.resume:
        payload = read_checkpoint(ckpt_path)
        cfg = resumed_config(config, payload, log)
        files = [Path(p) for p in payload.get("files", [])]
        missing = [p for p in files if not p.is_file()]
        if missing:
            raise UserError(f"{missing[0]}: a data file of this run is missing; cannot resume exactly")
    else:
        if ckpt_path.exists():
            raise UserError(f"{run_dir} already holds a run (checkpoint.pt): pass --resume or another --out")
        cfg = config
        files = resolve_inputs(cfg.data, cfg.num_files)
    validate(cfg)
    if cfg.deterministic:
        torch.use_deterministic_algorithms(True)
    device = pick_device(cfg.device, d)
    dtype = amp_dtype(cfg.amp, device)

    net = make_network(cfg, log)
    if payload is not None:
        net = network_from_payload(payload, ckpt_path).train()
    ensure_features2(net.config.input2)
    cache_dir = Path(cfg.cache_dir) if cfg.cache_dir else run_dir / "cache"
    direct, caches = _prepare_sources(files, cache_dir, cfg, d, log)
    corpus = open_corpus(direct, caches, net.config.input2)
    pin = device.type == "cuda"
    test_loader = None
    if cfg.test and d.main:
        test_batch = max(1, cfg.batch_size // cfg.accum_steps)
        test_loader = make_test_loader(
            cfg.test, cache_dir, net.config.input2, test_batch, cfg.test_limit, min(cfg.workers, 2), pin, log
        )

    sampler = EpochBatches(len(corpus), cfg.batch_size, cfg.seed, d.rank, d.world, cfg.accum_steps)
    steps_per_epoch = sampler.batches_per_epoch
    total_steps = cfg.epochs * steps_per_epoch
    loader = make_loader(BatchDataset(corpus, cfg.mirror), sampler, cfg.workers, pin)

    net.to(device)
    model: nn.Module = net
    if d.enabled:
        model = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if pin else None)
    optimizer = make_optimizer(net, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, cfg, total_steps, steps_per_epoch)
    )
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    ema = (
        AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema), use_buffers=True) if cfg.ema else None
    )

    step, epoch, batch_in_epoch = 0, 0, 0
    if payload is not None:
        optimizer.load_state_dict(payload["optimizer"])
        scheduler.load_state_dict(payload["scheduler"])
        scaler.load_state_dict(payload["scaler"])
        if ema is not None:
            ema.load_state_dict(payload["ema"])
        set_rng_state(payload["rng"])
        step, epoch, batch_in_epoch = int(payload["step"]), int(payload["epoch"]), int(payload["batch"])
        log(f"resuming {run_dir} at step {step} (epoch {epoch + 1}, batch {batch_in_epoch})")

    def saved_net() -> PolicyValueNetwork:
        return ema.module if ema is not None else net

    def save(path: Path) -> None:
        if not d.main:
            return
        save_checkpoint(
            path,
            net,
            optimizer=optimizer.state_dict(),
            scaler=scaler.state_dict(),
            scheduler=scheduler.state_dict(),
            ema=ema.state_dict() if ema is not None else None,
            step=step,
            epoch=epoch,
            batch=batch_in_epoch,
            rng=rng_state(),
            train_config=dataclasses.asdict(cfg),
            files=[str(p) for p in files],
        )

    if d.main:
        run_dir.mkdir(parents=True, exist_ok=True)
    metrics = MetricsLog(run_dir, d.main, cfg.tensorboard, cfg.plot_interval)
    if payload is not None:
        metrics.drop_after(step)
    last_test: dict[str, float] = {}

    def run_eval() -> None:
        nonlocal last_test
        if test_loader is None:
            return
        last_test = evaluate(saved_net(), test_loader, device, dtype)
        metrics.write({"step": step, "epoch": epoch, **last_test}, plot=True)
        log(
            f"step {step}: test policy acc {last_test['test_policy_acc']:.4f} "
            f"value acc {last_test['test_value_acc']:.4f} policy loss {last_test['test_policy_loss']:.4f} "
            f"value loss {last_test['test_value_loss']:.4f}"
        )

    if d.main:
        log(
            f"training on {len(corpus)} positions from {len(files)} file(s), {steps_per_epoch} steps/epoch, "
            f"{cfg.epochs} epoch(s), device {device}, {d.world} process(es)"
        )
    acc = torch.zeros(4, dtype=torch.float64, device=device)  # policy loss, policy rows, value loss, rows
    last_train: dict[str, float] = {}
    interval_start, interval_steps = time.perf_counter(), 0
    session_steps = 0
    started = time.perf_counter()
    bar = tqdm(
        total=total_steps * cfg.batch_size,
        initial=step * cfg.batch_size,
        unit="pos",
        unit_scale=True,
        dynamic_ncols=True,
        disable=not (d.main and cfg.progress),
    )
    stopped_by: str | None = None
    with StopFlag() as stop, bar:
        while epoch < cfg.epochs and stopped_by is None:
            sampler.set_epoch(epoch, batch_in_epoch)
            batches = iter(loader)
            while batch_in_epoch < steps_per_epoch:
                micro = [to_device(next(batches), device) for _ in range(cfg.accum_steps)]
                acc += train_step(model, micro, optimizer, scaler, cfg, d, dtype, device)
                scheduler.step()
                if ema is not None:
                    ema.update_parameters(net)
                step += 1
                batch_in_epoch += 1
                session_steps += 1
                interval_steps += 1
                bar.update(cfg.batch_size)
                if step % cfg.log_interval == 0 or batch_in_epoch == steps_per_epoch:
                    totals = _all_sum(acc.clone(), d).tolist()
                    acc.zero_()
                    now = time.perf_counter()
                    last_train = {
                        "policy_loss": totals[0] / max(totals[1], 1),
                        "value_loss": totals[2] / max(totals[3], 1),
                    }
                    last_train["loss"] = last_train["policy_loss"] + last_train["value_loss"]
                    rate = interval_steps * cfg.batch_size / max(now - interval_start, 1e-9)
                    metrics.write(
                        {
                            "step": step,
                            "epoch": epoch + batch_in_epoch / steps_per_epoch,
                            "samples": step * cfg.batch_size,
                            "lr": optimizer.param_groups[0]["lr"],
                            **last_train,
                            "samples_per_s": rate,
                        }
                    )
                    bar.set_postfix(
                        loss=f"{last_train['loss']:.4f}", lr=f"{optimizer.param_groups[0]['lr']:.3g}"
                    )
                    interval_start, interval_steps = now, 0
                if batch_in_epoch == steps_per_epoch:
                    epoch, batch_in_epoch = epoch + 1, 0
                    run_eval()
                    save(ckpt_path)
                    if cfg.save_epochs:
                        save(run_dir / f"checkpoint-epoch{epoch}.pt")
                    break
                if cfg.eval_interval and step % cfg.eval_interval == 0:
                    run_eval()
                if step % cfg.checkpoint_interval == 0:
                    save(ckpt_path)
                stopped_by = _should_stop(stop, session_steps, cfg, d, device)
                if stopped_by:
                    save(ckpt_path)
                    break
            del batches
    finished = epoch >= cfg.epochs
    model_path = run_dir / "model.pt"
    if finished and d.main:
        save_checkpoint(model_path, saved_net(), step=step, train_config=dataclasses.asdict(cfg))
        log(f"saved {model_path}")
    if stopped_by and d.main:
        log(f"stopped ({stopped_by}) at step {step}; checkpoint saved, continue with --resume")
    metrics.plot()
    metrics.close()
    if d.enabled:
        dist.barrier()
    return {
        "steps": step,
        "epochs_done": epoch,
        "finished": finished,
        "stopped_by": stopped_by,
        "positions": len(corpus),
        "steps_per_epoch": steps_per_epoch,
        "seconds": time.perf_counter() - started,
        **last_train,
        **last_test,
        "checkpoint": str(ckpt_path),
        "model": str(model_path) if finished else None,
    }


def _should_stop(
    stop: StopFlag, session_steps: int, cfg: TrainConfig, d: Dist, device: torch.device
) -> str | None:
    """Why to stop now, agreed by all ranks (a signal may reach only some of them)."""
    reason = 0
    if stop.signum is not None:
        reason = 1
    elif cfg.stop_after_steps is not None and session_steps >= cfg.stop_after_steps:
        reason = 2
    if d.enabled:
        t = torch.tensor([reason], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        reason = int(t.item())
    return {0: None, 1: "signal", 2: "--stop-after-steps"}[reason]


def train_step(
    model: nn.Module,
    micro: list[Batch],
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    cfg: TrainConfig,
    d: Dist,
    dtype: torch.dtype | None,
    device: torch.device,
) -> torch.Tensor:
    """One optimizer step over this rank's micro-batches; returns (policy loss sum, policy rows,
    value loss sum, rows) for logging. Loss sums are divided by the global counts (times world, as
    DDP averages gradients over ranks), so the gradient is the mean over the whole global batch."""
    counts = (
        torch.stack(
            [
                torch.stack([has_policy(b.policy).sum(), torch.tensor(len(b.result), device=device)])
                for b in micro
            ]
        )
        .sum(0)
        .double()
    )
    counts = _all_sum(counts, d)
    policy_rows, rows = counts[0].clamp_min(1), counts[1]
    logged = torch.zeros(4, dtype=torch.float64, device=device)
    for j, b in enumerate(micro):
        sync = contextlib.nullcontext()
        if d.enabled and j < len(micro) - 1:
            sync = model.no_sync()
        with sync:
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                logits, v = model(b.x1, b.x2)
            p_sum = policy_loss_sum(logits, b.policy)
            v_sum = value_loss_sum(v, b.result, b.value, cfg.val_lambda)
            loss = (p_sum / policy_rows + v_sum / rows) * d.world
            scaler.scale(loss).backward()
        logged += torch.stack(
            [
                p_sum.detach(),
                has_policy(b.policy).sum(),
                v_sum.detach(),
                torch.tensor(len(b.result), device=device),
            ]
        ).double()
    if cfg.clip_grad:
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return logged
