"""A network's shape without torch: the input plane counts, NetworkConfig and the named presets.

Apart from engine/core/network.py (the torch modules), so that a command line can offer the presets, and
a learning loop check one, without loading torch; features.py and dlshogi_format.py take their numbers
from here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from engine.errors import UserError

FEATURES1_NUM = 62  # input1 planes: pieces, attacks (dlshogi's make_input_features)
FEATURES2_NUM = 57  # input2 planes: pieces in hand, check
FEATURES2_NYUGYOKU_NUM = 119  # input2 with dlshogi's optional nyugyoku features
DLSHOGI_BN_EPS = 1e-5  # dlshogi's BatchNorm eps: PyTorch's default


@dataclass(frozen=True)
class NetworkConfig:
    blocks: int = 10
    channels: int = 192
    fcl: int = 256
    activation: str = "swish"  # "swish" (SiLU, dlshogi's resnet*_swish) or "relu"
    input2: int = FEATURES2_NUM  # 57, or 119 with nyugyoku features
    bn_eps: float = DLSHOGI_BN_EPS


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
