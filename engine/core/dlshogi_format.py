"""dlshogi's model files, both ways: its trainer checkpoints ({'epoch', 't', 'model', ...}), its
Chainer-style `--model`/`--initmodel` npz files, and the layer names of its nets.

engine.core.network's state dicts use the names of dlshogi's generic `resnetBxC_fclF[_act]`
(policy_value_network_resnet.py: `blocks.i.conv1`, `policy`, `policy_bias`, `value_fc1`, ...). dlshogi's
published default `resnet10_swish` computes the same function under fixed names (`l2`..`l21`,
`norm2`..`norm21`, `l22`, `l22_2`, `l22_v`, `norm22_v`, `l23_v`, `l24_v`); its old `wideresnet10` is a
different (pre-activation) net. dlshogi's BatchNorm eps is PyTorch's default 1e-5, and a checkpoint does
not record its activation: the generic nets are ReLU unless their name ends in `_swish`.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import numpy as np
import torch

from engine.core.network_config import DLSHOGI_BN_EPS
from engine.errors import UserError
from engine.fileio import atomic_write

ACTIVATIONS = ("relu", "swish")
RESNET10_BLOCKS = 10


def _resnet10_swish_names() -> dict[str, str]:
    """resnet10_swish module name -> generic module name."""
    names = {
        "l22": "policy",
        "l22_2": "policy_bias",
        "l22_v": "value_conv1",
        "norm22_v": "value_norm1",
        "l23_v": "value_fc1",
        "l24_v": "value_fc2",
    }
    for i in range(RESNET10_BLOCKS):
        names[f"l{2 * i + 2}"] = f"blocks.{i}.conv1"
        names[f"norm{2 * i + 2}"] = f"blocks.{i}.bn1"
        names[f"l{2 * i + 3}"] = f"blocks.{i}.conv2"
        names[f"norm{2 * i + 3}"] = f"blocks.{i}.bn2"
    return names


RESNET10_SWISH_NAMES = _resnet10_swish_names()
GENERIC_TO_RESNET10_SWISH = {v: k for k, v in RESNET10_SWISH_NAMES.items()}


def _rename(state: dict[str, torch.Tensor], names: dict[str, str]) -> dict[str, torch.Tensor]:
    """Rename module prefixes (the part before the parameter name); other keys are kept."""
    out = {}
    for key, value in state.items():
        module, _, param = key.rpartition(".")
        out[f"{names.get(module, module)}.{param}"] = value
    return out


def generic_state(state: dict[str, torch.Tensor], source: str | os.PathLike) -> tuple[dict, str | None]:
    """A dlshogi ResNet state dict under the generic names, and the activation its layout fixes
    (resnet10_swish: "swish"; the generic layout: None, it does not say)."""
    if "l22_v.bias" in state:
        raise UserError(
            f"{source}: a dlshogi wideresnet10 network (pre-activation ResNet) is not supported; "
            "load its ONNX export instead"
        )
    if "l22_2.bias" in state:
        return _rename(state, RESNET10_SWISH_NAMES), "swish"
    return dict(state), None


def resnet10_swish_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Generic names -> dlshogi's fixed resnet10_swish names (for a 10x192 fcl256 swish net)."""
    return _rename(state, GENERIC_TO_RESNET10_SWISH)


def activation_from_name(path: str | os.PathLike) -> str | None:
    """The activation a dlshogi network name in the file name spells (`..._swish`, `..._relu`), else None."""
    found = set(re.findall(r"_(swish|relu)(?![a-z])", Path(path).name.lower()))
    return found.pop() if len(found) == 1 else None


def resolve_activation(path: str | os.PathLike, fixed: str | None, option: str | None) -> str:
    """The activation of a dlshogi file: what its layout fixes, else the option, else its file name;
    never a silent guess."""
    if option is not None and option not in ACTIVATIONS:
        raise UserError(f"unknown activation {option!r} (choose from {', '.join(ACTIVATIONS)})")
    if fixed is not None:
        if option is not None and option != fixed:
            raise UserError(f"{path}: this network is always {fixed}; the activation option says {option}")
        return fixed
    act = option or activation_from_name(path)
    if act is None:
        raise UserError(
            f"{path}: a dlshogi checkpoint does not record its activation; pass --activation relu|swish "
            "(USI: setoption name DNN_Activation value relu|swish)"
        )
    return act


# ----- npz (dlshogi's --model / --initmodel files, Chainer-style names) -----

_NPZ_PARAMS = {
    "W": "weight",
    "b": "bias",
    "gamma": "weight",
    "beta": "bias",
    "avg_mean": "running_mean",
    "avg_var": "running_var",
    "N": "num_batches_tracked",
}


def is_npz(path: str | os.PathLike) -> bool:
    """A numpy .npz archive (every member a .npy), as opposed to torch's zip format."""
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError):
        return False
    return bool(names) and all(n.endswith(".npy") for n in names)


def read_npz(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """dlshogi's npz model file as a state dict (`blocks/0/bn1/gamma` -> `blocks.0.bn1.weight`)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise UserError(f"{path}: not a readable npz model file ({str(e).splitlines()[0][:200]})") from None
    state = {}
    for key, value in arrays.items():
        module, _, param = key.rpartition("/")
        if param not in _NPZ_PARAMS:
            raise UserError(f"{path}: {key!r} is not a dlshogi npz parameter name")
        state[f"{module.replace('/', '.')}.{_NPZ_PARAMS[param]}"] = torch.from_numpy(np.array(value))
    return state


def npz_arrays(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """A state dict under dlshogi's npz names (BatchNorm weight/bias -> gamma/beta, others W/b)."""
    bn = {k.rpartition(".")[0] for k in state if k.endswith(".running_mean")}
    out = {}
    for key, value in state.items():
        module, _, param = key.rpartition(".")
        if module in bn:
            name = {
                "weight": "gamma",
                "bias": "beta",
                "running_mean": "avg_mean",
                "running_var": "avg_var",
                "num_batches_tracked": "N",
            }[param]
        else:
            name = {"weight": "W", "bias": "b"}[param]
        out[f"{module.replace('.', '/')}/{name}"] = value.detach().cpu().numpy()
    return out


# ----- writing -----


def network_name(blocks: int, channels: int, fcl: int, activation: str) -> str:
    """dlshogi's --network name for the generic net of this shape."""
    return f"resnet{blocks}x{channels}_fcl{fcl}_{activation}"


def with_dlshogi_eps(state: dict[str, torch.Tensor], bn_eps: float) -> dict[str, torch.Tensor]:
    """Fold a different BatchNorm eps into the running variances, so that under dlshogi's 1e-5 the
    inference outputs stay the same (var + eps is all eval-mode BatchNorm uses)."""
    if bn_eps == DLSHOGI_BN_EPS:
        return dict(state)
    return {k: (v + (bn_eps - DLSHOGI_BN_EPS) if k.endswith(".running_var") else v) for k, v in state.items()}


def write_dlshogi(
    path: str | os.PathLike, state: dict[str, torch.Tensor], bn_eps: float, resnet10_swish: bool = False
) -> Path:
    """Write weights as dlshogi reads them: `.npz` -> a --model/--initmodel file, anything else -> a
    trainer checkpoint {'epoch': 0, 't': 0, 'model': ...} (dlshogi's train.py --resume with
    --reset_optimizer). resnet10_swish: its fixed names instead of the generic ones."""
    path = Path(path)
    state = {k: v.detach().cpu().clone() for k, v in with_dlshogi_eps(state, bn_eps).items()}
    if resnet10_swish:
        state = resnet10_swish_state(state)
    with atomic_write(path) as f:
        if path.suffix.lower() == ".npz":
            np.savez(f, **npz_arrays(state))
        else:
            torch.save({"epoch": 0, "t": 0, "model": state}, f)
    return path
