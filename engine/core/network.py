"""The policy-value ResNet: dlshogi's generic `resnetBxC_fclF[_swish]` network, same layer names and
arithmetic, so its state dicts and ours are interchangeable (engine/core/dlshogi_format.py maps the rest).

Our checkpoints record their own architecture (`config`), so a file alone is enough to rebuild the
network; they are plain dicts of tensors and primitives, loadable with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engine.core import dlshogi_format
from engine.core.features import FEATURES1_NUM
from engine.core.moves import NUM_DIRECTIONS, NUM_MOVE_LABELS
from engine.core.network_config import PRESETS, NetworkConfig, preset
from engine.errors import UserError
from engine.fileio import atomic_write

CHECKPOINT_FORMAT = "gumbel-shogi-checkpoint/1"
# Our checkpoints written before bn_eps was recorded used 2e-5; dlshogi (and new nets) use 1e-5.
LEGACY_BN_EPS = 2e-5
LEGACY_NAMES = {"policy_conv": "policy"}


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
    def __init__(self, channels: int, act: nn.Module, eps: float) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels, eps=eps)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels, eps=eps)
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
        c, eps = config.channels, config.bn_eps
        self.act = _activation(config.activation)
        self.l1_1_1 = nn.Conv2d(FEATURES1_NUM, c, 3, padding=1, bias=False)
        self.l1_1_2 = nn.Conv2d(FEATURES1_NUM, c, 1, bias=False)
        self.l1_2 = nn.Conv2d(config.input2, c, 1, bias=False)
        self.norm1 = nn.BatchNorm2d(c, eps=eps)
        self.blocks = nn.Sequential(*[ResNetBlock(c, self.act, eps) for _ in range(config.blocks)])
        self.policy = nn.Conv2d(c, NUM_DIRECTIONS, 1, bias=False)
        self.policy_bias = Bias(NUM_MOVE_LABELS)
        self.value_conv1 = nn.Conv2d(c, NUM_DIRECTIONS, 1, bias=False)
        self.value_norm1 = nn.BatchNorm2d(NUM_DIRECTIONS, eps=eps)
        self.value_fc1 = nn.Linear(NUM_MOVE_LABELS, config.fcl)
        self.value_fc2 = nn.Linear(config.fcl, 1)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.act(self.norm1(self.l1_1_1(x1) + self.l1_1_2(x1) + self.l1_2(x2)))
        h = self.blocks(h)
        policy = self.policy_bias(torch.flatten(self.policy(h), 1))
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
    """Infer the architecture of a generic-named state dict (dlshogi checkpoints carry no config)."""
    blocks = len({k.split(".")[1] for k in state if k.startswith("blocks.")})
    return NetworkConfig(
        blocks=blocks,
        channels=int(state["l1_1_1.weight"].shape[0]),
        fcl=int(state["value_fc1.weight"].shape[0]),
        activation=activation,
        input2=int(state["l1_2.weight"].shape[1]),
        bn_eps=dlshogi_format.DLSHOGI_BN_EPS,
    )


def config_from_dict(saved: dict[str, Any], source: str | os.PathLike) -> NetworkConfig:
    """A checkpoint's recorded config; one written before `bn_eps` was recorded used LEGACY_BN_EPS."""
    try:
        config = NetworkConfig(**{"bn_eps": LEGACY_BN_EPS, **saved})
    except TypeError as e:
        raise UserError(f"{source}: checkpoint config is not a network config ({e})") from None
    _activation(config.activation)
    return config


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """torch.load with weights_only=True; any failure becomes a one-line UserError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: checkpoint not found")
    if path.stat().st_size == 0:
        raise UserError(f"{path}: not a checkpoint (empty file)")
    if not zipfile.is_zipfile(path) and not _starts_with(path, b"\x80"):  # zip format, or legacy pickle
        raise UserError(f"{path}: not a checkpoint (not a PyTorch file)")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle/zip errors vary by torch version; never quote torch's advice
        text = str(e)
        found = re.search(r"Unsupported global: GLOBAL (\S+)", text)
        if found:
            raise UserError(
                f"{path}: holds Python objects, not just tensors ({found[1]}); only weights load safely"
            ) from None
        first = "weights-only load refused" if "Weights only load failed" in text else text.strip()
        first = (first.splitlines() or [type(e).__name__])[0]
        raise UserError(f"{path}: not a loadable checkpoint ({first[:200]})") from None
    if not isinstance(payload, dict):
        raise UserError(f"{path}: not a checkpoint (a {type(payload).__name__}, expected a dict)")
    return payload


def _starts_with(path: Path, magic: bytes) -> bool:
    with open(path, "rb") as f:
        return f.read(len(magic)) == magic


def _state_mismatch(net: nn.Module, state: dict[str, Any]) -> str | None:
    """The first difference between a network's parameters and a state dict, in one line."""
    expected = net.state_dict()
    for key, want in expected.items():
        got = state.get(key)
        if got is None:
            return f"{key} is missing"
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return f"{key} is {shape}, expected {list(want.shape)}"
    extra = sorted(set(state) - set(expected))
    if not extra:
        return None
    return f"unexpected {extra[0]}" + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else "")


def network_from_state(
    config: NetworkConfig, state: dict[str, Any], source: str | os.PathLike, what: str = "its config"
) -> PolicyValueNetwork:
    """Build `config` and load `state`; a mismatch is one line naming the first differing weight."""
    net = PolicyValueNetwork(config)
    problem = _state_mismatch(net, state)
    if problem:
        arch = f"{config.blocks} blocks x {config.channels} channels, fcl {config.fcl}"
        raise UserError(f"{source}: weights do not match {what} ({arch}): {problem}")
    net.load_state_dict(state)
    return net


def network_from_payload(
    payload: dict[str, Any], source: str | os.PathLike, activation: str | None = None
) -> PolicyValueNetwork:
    """The network of a loaded file: our checkpoint ({format, config, model}) or dlshogi's
    ({'model': state_dict}, a bare state dict, or npz arrays); activation is the user's option, needed
    only where the file does not say."""
    state = payload.get("model", payload)
    if not isinstance(state, dict) or "l1_1_1.weight" not in state:
        raise UserError(f"{source}: checkpoint has no policy-value network weights")
    if "config" in payload:
        config = config_from_dict(payload["config"], source)
        if activation is not None and activation != config.activation:
            raise UserError(
                f"{source}: this network is {config.activation}; the activation option says {activation}"
            )
        state = {_legacy_name(k): v for k, v in state.items()}
        return network_from_state(config, state, source)
    state, fixed = dlshogi_format.generic_state(state, source)
    if "value_fc1.weight" not in state or "l1_2.weight" not in state:
        raise UserError(f"{source}: not a dlshogi ResNet (no value_fc1 or l23_v layer)")
    config = config_from_state_dict(state, dlshogi_format.resolve_activation(source, fixed, activation))
    return network_from_state(config, state, source, "a dlshogi ResNet")


def _legacy_name(key: str) -> str:
    module, _, param = key.partition(".")
    return f"{LEGACY_NAMES.get(module, module)}.{param}"


def load_model(path: str | os.PathLike, activation: str | None = None) -> PolicyValueNetwork:
    """Load our checkpoint, or a dlshogi trainer checkpoint / state dict / npz model file (the activation
    from `activation`, else the file name; see engine/core/dlshogi_format.py)."""
    path = Path(path)
    if path.is_file() and dlshogi_format.is_npz(path):
        return network_from_payload(dlshogi_format.read_npz(path), path, activation).eval()
    return network_from_payload(read_checkpoint(path), path, activation).eval()


def save_dlshogi(path: str | os.PathLike, net: PolicyValueNetwork, resnet10_swish: bool = False) -> str:
    """Write `net` as dlshogi loads it (.npz model file, else trainer checkpoint); returns the dlshogi
    --network name to use with it."""
    c = net.config
    name = dlshogi_format.network_name(c.blocks, c.channels, c.fcl, c.activation)
    if resnet10_swish:
        if (c.blocks, c.channels, c.fcl, c.activation) != (10, 192, 256, "swish"):
            raise UserError(f"{path}: only a 10x192 fcl256 swish net is dlshogi's resnet10_swish, not {name}")
        name = "resnet10_swish"
    dlshogi_format.write_dlshogi(path, net.state_dict(), c.bn_eps, resnet10_swish)
    return name


__all__ = [
    "CHECKPOINT_FORMAT",
    "NetworkConfig",
    "PRESETS",
    "PolicyValueNetwork",
    "WithSigmoid",
    "build",
    "config_from_dict",
    "config_from_state_dict",
    "load_model",
    "network_from_payload",
    "network_from_state",
    "preset",
    "read_checkpoint",
    "save_checkpoint",
    "save_dlshogi",
]
