"""The dlshogi policy-value ResNet, with dlshogi's parameter names so dlshogi state dicts load as-is.

Checkpoints record their own architecture (`config`), so a file alone is enough to rebuild the
network; they are plain dicts of tensors and primitives, loadable with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engine.errors import UserError
from engine.features import FEATURES1_NUM, FEATURES2_NUM
from engine.fileio import atomic_write
from engine.moves import NUM_DIRECTIONS, NUM_MOVE_LABELS
from engine.score import EVAL_COEF, eval_to_value, value_to_eval

CHECKPOINT_FORMAT = "gumbel-shogi-checkpoint/1"


@dataclass(frozen=True)
class NetworkConfig:
    blocks: int = 10
    channels: int = 192
    fcl: int = 256
    activation: str = "swish"  # "swish" (SiLU, dlshogi's resnet*_swish) or "relu"
    input2: int = FEATURES2_NUM  # 57, or 119 with nyugyoku features


PRESETS: dict[str, NetworkConfig] = {
    "tiny": NetworkConfig(blocks=2, channels=32, fcl=32),  # tests
    "small": NetworkConfig(blocks=5, channels=64, fcl=128),  # CPU default
    "resnet10": NetworkConfig(blocks=10, channels=192, fcl=256),  # dlshogi default
    "resnet15": NetworkConfig(blocks=15, channels=224, fcl=256),
    "resnet20": NetworkConfig(blocks=20, channels=256, fcl=256),
}


def preset(name: str, **overrides: Any) -> NetworkConfig:
    if name not in PRESETS:
        raise UserError(f"unknown network preset {name!r} (choose from {', '.join(PRESETS)})")
    return replace(PRESETS[name], **overrides)


def _activation(name: str) -> nn.Module:
    if name == "swish":
        return nn.SiLU()
    if name == "relu":
        return nn.ReLU()
    raise UserError(f"unknown activation {name!r} (swish or relu)")


class Bias(nn.Module):
    """dlshogi's learned per-label policy bias (named `policy_bias.bias`)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias


class ResNetBlock(nn.Module):
    def __init__(self, channels: int, act: nn.Module) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels, eps=2e-05)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels, eps=2e-05)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return self.act(h + x)


class PolicyValueNetwork(nn.Module):
    """forward(x1, x2) -> (policy logits [N, 2187], value logit [N, 1])."""

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        self.config = config
        c = config.channels
        self.act = _activation(config.activation)
        self.l1_1_1 = nn.Conv2d(FEATURES1_NUM, c, 3, padding=1, bias=False)
        self.l1_1_2 = nn.Conv2d(FEATURES1_NUM, c, 1, bias=False)
        self.l1_2 = nn.Conv2d(config.input2, c, 1, bias=False)
        self.norm1 = nn.BatchNorm2d(c, eps=2e-05)
        self.blocks = nn.Sequential(*[ResNetBlock(c, self.act) for _ in range(config.blocks)])
        self.policy_conv = nn.Conv2d(c, NUM_DIRECTIONS, 1, bias=False)
        self.policy_bias = Bias(NUM_MOVE_LABELS)
        self.value_conv1 = nn.Conv2d(c, NUM_DIRECTIONS, 1, bias=False)
        self.value_norm1 = nn.BatchNorm2d(NUM_DIRECTIONS, eps=2e-05)
        self.value_fc1 = nn.Linear(NUM_MOVE_LABELS, config.fcl)
        self.value_fc2 = nn.Linear(config.fcl, 1)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.act(self.norm1(self.l1_1_1(x1) + self.l1_1_2(x1) + self.l1_2(x2)))
        h = self.blocks(h)
        policy = self.policy_bias(torch.flatten(self.policy_conv(h), 1))
        v = self.act(self.value_norm1(self.value_conv1(h)))
        v = self.act(self.value_fc1(torch.flatten(v, 1)))
        return policy, self.value_fc2(v)


class WithSigmoid(nn.Module):
    """The served form (as dlshogi exports): value as a win probability for the side to move."""

    def __init__(self, net: PolicyValueNetwork) -> None:
        super().__init__()
        self.net = net

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        policy, value = self.net(x1, x2)
        return policy, torch.sigmoid(value)


def build(config: NetworkConfig, seed: int | None = None) -> PolicyValueNetwork:
    if seed is not None:
        torch.manual_seed(seed)
    return PolicyValueNetwork(config)


def save_checkpoint(path: str | os.PathLike, net: PolicyValueNetwork, **extra: Any) -> None:
    """Write {format, config, model, **extra} atomically; extra holds the trainer's state."""
    payload = {"format": CHECKPOINT_FORMAT, "config": asdict(net.config), "model": net.state_dict(), **extra}
    with atomic_write(path) as f:
        torch.save(payload, f)


def config_from_state_dict(state: dict[str, torch.Tensor], activation: str = "swish") -> NetworkConfig:
    """Infer the architecture of a dlshogi-style state dict (dlshogi checkpoints carry no config)."""
    blocks = len({k.split(".")[1] for k in state if k.startswith("blocks.")})
    return NetworkConfig(
        blocks=blocks,
        channels=int(state["l1_1_1.weight"].shape[0]),
        fcl=int(state["value_fc1.weight"].shape[0]),
        activation=activation,
        input2=int(state["l1_2.weight"].shape[1]),
    )


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """torch.load with weights_only=True; any failure becomes a one-line UserError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: checkpoint not found")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle/zip errors vary by torch version
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{path}: not a loadable checkpoint ({first[:200]})") from None
    if not isinstance(payload, dict):
        raise UserError(f"{path}: not a checkpoint (a {type(payload).__name__}, expected a dict)")
    return payload


def load_model(path: str | os.PathLike, activation: str = "swish") -> PolicyValueNetwork:
    """Load our checkpoint, or a dlshogi one ({'model': state_dict} or a bare state dict)."""
    payload = read_checkpoint(path)
    state = payload.get("model", payload)
    if not isinstance(state, dict) or "l1_1_1.weight" not in state:
        raise UserError(f"{path}: checkpoint has no policy-value network weights")
    try:
        if "config" in payload:
            config = NetworkConfig(**payload["config"])
        else:
            config = config_from_state_dict(state, activation)
        net = PolicyValueNetwork(config)
        net.load_state_dict(state)
    except (TypeError, KeyError, RuntimeError) as e:
        raise UserError(f"{path}: network weights do not match their architecture ({str(e)[:200]})") from None
    return net.eval()


def count_parameters(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


__all__ = [
    "CHECKPOINT_FORMAT",
    "EVAL_COEF",
    "NetworkConfig",
    "PRESETS",
    "PolicyValueNetwork",
    "WithSigmoid",
    "build",
    "config_from_state_dict",
    "count_parameters",
    "eval_to_value",
    "load_model",
    "preset",
    "read_checkpoint",
    "save_checkpoint",
    "value_to_eval",
]
