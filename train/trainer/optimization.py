"""How the weights move: the optimizer with its learning-rate schedule, loss scaler and EMA, and one
optimizer step over a rank's micro-batches."""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from engine.core.network import PolicyValueNetwork
from train.data.dataset import Batch
from train.trainer.config import DEFAULT_LR, TrainConfig, lr_factor
from train.trainer.distributed import Dist, all_sum
from train.trainer.evaluation import has_policy, policy_loss_sum, value_loss_sum


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


def make_optimization(
    net: PolicyValueNetwork,
    cfg: TrainConfig,
    steps_per_epoch: int,
    device: torch.device,
    dtype: torch.dtype | None,
) -> tuple[
    torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR, torch.amp.GradScaler, AveragedModel | None
]:
    """The optimizer, its learning-rate schedule, the fp16 loss scaler and the weights' EMA (--ema)."""
    optimizer = make_optimizer(net, cfg)
    total_steps = cfg.epochs * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, cfg, total_steps, steps_per_epoch)
    )
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    ema = (
        AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema), use_buffers=True) if cfg.ema else None
    )
    return optimizer, scheduler, scaler, ema


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
    counts = all_sum(counts, d)
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
