"""Checkpoint -> ONNX in dlshogi's convention (FP32, or FP16-typed with the value head kept in FP32).

Lives in `engine` (not `export`) because the onnx and TensorRT backends export on demand into a cache;
export/onnx_export.py adds verification and the command line on top.
"""

from __future__ import annotations

import copy
import hashlib
import io
import os
import warnings
from pathlib import Path

import torch
from torch import nn

from engine.backends.io_spec import BATCH_AXIS, INPUT_NAMES, OUTPUT_NAMES
from engine.backends.onnx_files import DEFAULT_OPSET, exported_onnx_path, onnx_tag
from engine.core.features import FEATURES1_NUM
from engine.core.network import PolicyValueNetwork, WithSigmoid
from engine.fileio import atomic_write_bytes

VALUE_HEAD = ("value_conv1", "value_norm1", "value_fc1", "value_fc2")


def _to_float(module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(a.float() for a in args)


def served_module(net: PolicyValueNetwork, fp16: bool = False) -> nn.Module:
    """The module exported: value as a sigmoid probability; with fp16, trunk and policy head in half
    precision while the value head (conv, BN, FCs, sigmoid) stays FP32, where FP16 loses win rates
    near 0 and 1. The caller's network is never modified."""
    net = copy.deepcopy(net).cpu().eval()
    if fp16:
        net.half()
        for name in VALUE_HEAD:
            getattr(net, name).float()
        net.value_conv1.register_forward_pre_hook(_to_float)
    return WithSigmoid(net).eval()


def onnx_bytes(net: PolicyValueNetwork, opset: int = DEFAULT_OPSET, fp16: bool = False) -> bytes:
    """Serialized ONNX with a dynamic `batch_size` axis on all four tensors (legacy TorchScript exporter,
    which handles the mixed-precision module reliably)."""
    module = served_module(net, fp16)
    dtype = torch.float16 if fp16 else torch.float32
    x1 = torch.zeros(2, FEATURES1_NUM, 9, 9, dtype=dtype)
    x2 = torch.zeros(2, net.config.input2, 9, 9, dtype=dtype)
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (x1, x2),
            buf,
            input_names=list(INPUT_NAMES),
            output_names=list(OUTPUT_NAMES),
            dynamic_axes={name: {0: BATCH_AXIS} for name in (*INPUT_NAMES, *OUTPUT_NAMES)},
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
    return buf.getvalue()


def write_onnx(
    net: PolicyValueNetwork, out: str | os.PathLike, opset: int = DEFAULT_OPSET, fp16: bool = False
) -> Path:
    """Export atomically: a reader never sees a half-written model."""
    out = Path(out)
    atomic_write_bytes(out, onnx_bytes(net, opset, fp16))
    return out


def cached_onnx(
    net: PolicyValueNetwork,
    source: Path | None,
    cache_dir: Path,
    fp16: bool = False,
    opset: int = DEFAULT_OPSET,
    activation: str | None = None,
) -> Path:
    """ONNX for `net` under `cache_dir`: for a checkpoint `source` (read with `activation`) at
    exported_onnx_path, else keyed by the exported bytes' own hash, so repeated starts reuse it and a
    changed checkpoint gets a new one."""
    tag = onnx_tag(fp16, opset)
    if source is not None:
        path = exported_onnx_path(source, activation, cache_dir, tag)
        return path if path.is_file() else write_onnx(net, path, opset, fp16)
    data = onnx_bytes(net, opset, fp16)
    path = cache_dir / f"mem-{hashlib.sha256(data).hexdigest()[:24]}-{tag}.onnx"
    if not path.is_file():
        atomic_write_bytes(path, data)
    return path
