#!/usr/bin/env python3
"""Checkpoint -> ONNX in dlshogi's convention, verified against PyTorch on real positions.

    python export/onnx_export.py model.pt model.onnx            # FP32
    python export/onnx_export.py model.pt model-fp16.onnx --fp16  # FP16-typed (TensorRT 11), value head FP32

The file is written (atomically) only when onnxruntime's outputs agree with PyTorch's within the
tolerance on positions from random legal games; otherwise the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cshogi
import numpy as np

from engine.backends.onnx_model import DEFAULT_OPSET, onnx_bytes
from engine.core.network import PolicyValueNetwork, load_model
from engine.core.position import random_positions
from engine.errors import UserError, cli_main
from engine.fileio import atomic_write_bytes, check_output_file

# Policy tolerance is relative to the largest logit (random-init deep nets have large ones); value
# tolerance is absolute on the win probability.
TOLERANCE = {False: 1e-3, True: 3e-2}


@dataclass(frozen=True)
class ExportReport:
    path: Path
    fp16: bool
    opset: int
    positions: int
    policy_max_abs: float  # over logits
    value_max_abs: float  # over win probabilities
    tolerance: float
    ok: bool

    def __str__(self) -> str:
        kind = "FP16-typed" if self.fp16 else "FP32"
        if not self.positions:
            return f"{self.path}: {kind} ONNX (opset {self.opset}), not verified"
        verdict = "ok" if self.ok else "FAILED"
        return (
            f"{self.path}: {kind} ONNX (opset {self.opset}); vs PyTorch on {self.positions} positions: "
            f"policy logits max abs diff {self.policy_max_abs:.3g}, value max abs diff "
            f"{self.value_max_abs:.3g} (tolerance {self.tolerance:g}) {verdict}"
        )


def compare(
    onnx_path: Path, net: PolicyValueNetwork, boards: list[cshogi.Board]
) -> tuple[float, float, float]:
    """(policy max abs diff, value max abs diff, largest |logit|) of onnxruntime CPU vs torch CPU FP32."""
    from engine.backends.onnx_evaluator import OnnxEvaluator
    from engine.backends.torch_evaluator import TorchEvaluator

    with OnnxEvaluator(onnx_path, max_batch=64) as ev:
        policy, value = ev.evaluate_boards(boards)
    with TorchEvaluator(net.cpu(), max_batch=64, device="cpu", fp16=False) as ref:
        ref_policy, ref_value = ref.evaluate_boards(boards)
    return (
        float(np.abs(policy - ref_policy).max()),
        float(np.abs(value - ref_value).max()),
        float(np.abs(ref_policy).max()),
    )


def export_onnx(
    checkpoint_or_net: str | os.PathLike | PolicyValueNetwork,
    out: str | os.PathLike,
    opset: int = DEFAULT_OPSET,
    fp16: bool = False,
    verify: bool = True,
    positions: int = 64,
    tolerance: float | None = None,
    activation: str | None = None,
) -> ExportReport:
    """Export and (unless verify=False) check against PyTorch; `out` is written only if the check
    passes. Returns the report either way."""
    out = check_output_file(out)  # before the export and check, not after them
    net = checkpoint_or_net
    if not isinstance(net, PolicyValueNetwork):
        net = load_model(checkpoint_or_net, activation)
    tolerance = TOLERANCE[fp16] if tolerance is None else tolerance
    data = onnx_bytes(net, opset, fp16)
    if not verify:
        atomic_write_bytes(out, data)
        return ExportReport(out, fp16, opset, 0, float("nan"), float("nan"), tolerance, True)
    with tempfile.TemporaryDirectory() as tmp:
        candidate = Path(tmp) / "candidate.onnx"
        candidate.write_bytes(data)
        policy_diff, value_diff, scale = compare(candidate, net, random_positions(positions))
    ok = policy_diff <= tolerance * max(1.0, scale) and value_diff <= tolerance
    if ok:
        atomic_write_bytes(out, data)
    return ExportReport(out, fp16, opset, positions, policy_diff, value_diff, tolerance, ok)


@cli_main("onnx_export")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="onnx_export", description=__doc__.split("\n")[1])
    parser.add_argument("checkpoint", help="checkpoint: ours, or dlshogi's (trainer .pth, state dict, npz)")
    parser.add_argument("out", help="ONNX file to write")
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET)
    parser.add_argument("--fp16", action="store_true", help="FP16 weights and I/O; value head stays FP32")
    parser.add_argument("--no-verify", action="store_true", help="skip the comparison with PyTorch")
    parser.add_argument("--positions", type=int, default=64, help="positions compared (default 64)")
    parser.add_argument("--tolerance", type=float, default=None, help="default 1e-3, 3e-2 with --fp16")
    parser.add_argument("--activation", choices=("relu", "swish"), help="of a dlshogi checkpoint")
    args = parser.parse_args(argv)
    if args.positions < 1:
        raise UserError("--positions must be >= 1")
    report = export_onnx(
        args.checkpoint,
        args.out,
        args.opset,
        args.fp16,
        not args.no_verify,
        args.positions,
        args.tolerance,
        args.activation,
    )
    print(report)
    if not report.ok:
        print(f"onnx_export: error: {args.out} not written: outputs differ beyond tolerance", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
