"""The trainer's losses and the held-out evaluation of a network (test losses and accuracies)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from engine.core.network import load_model
from engine.errors import UserError
from train.data.dataset import (
    Batch,
    BatchDataset,
    SequentialBatches,
    hcpe3_cache_for,
    make_loader,
    open_corpus,
    plan_sources,
    resolve_inputs,
    to_device,
)


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


@torch.no_grad()
def evaluate(
    net: nn.Module, loader: Iterable[Batch], device: torch.device, dtype: torch.dtype | None
) -> dict[str, float]:
    """Test losses and accuracies: policy top-1 against the target's argmax (rows with a policy);
    value sign against the result on decisive positions (a draw has no right side of 0.5); the
    entropy of the network's policy on rows with a policy (a net trained on sharp targets sharpens)."""
    was_training = net.training
    net.eval()
    sums = torch.zeros(8, dtype=torch.float64, device=device)
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
                (-(F.softmax(logits.float(), 1) * F.log_softmax(logits.float(), 1)).sum(1) * mask).sum(),
            ]
        ).double()
    net.train(was_training)
    p_loss, p_rows, p_hit, v_loss, rows, v_hit, decisive_rows, p_entropy = sums.tolist()
    return {
        "test_policy_loss": p_loss / max(p_rows, 1),
        "test_value_loss": v_loss / max(rows, 1),
        "test_policy_acc": p_hit / max(p_rows, 1),
        "test_value_acc": v_hit / max(decisive_rows, 1),
        "test_policy_entropy": p_entropy / max(p_rows, 1),
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
