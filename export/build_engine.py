#!/usr/bin/env python3
"""ONNX -> TensorRT engine (FP16 by default), cached by model sha256 + GPU + TensorRT version + max
batch + precision + build with a JSON sidecar; an existing engine whose sidecar does not match is rebuilt.

    python export/build_engine.py model.onnx --max-batch 256 --opt-batch 128
    python export/build_engine.py dlshogi.onnx                 # a dlshogi model, FP16 on TensorRT 10 and 11
    python export/build_engine.py model.onnx --precision fp32
    python export/build_engine.py model.onnx --device cuda:1   # built on (and for) the second GPU

FP16 on TensorRT 10: the builder's FP16 flag over the FP32 ONNX. TensorRT 11 has no such flag (its
networks are strongly typed): an FP32 ONNX is converted once to an FP16-typed twin, inputs and outputs
kept float32, checked against it on the CPU and cached beside the engine (docs/backends.md).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.trt_build import PRECISIONS, build_cached_engine
from engine.errors import UserError, cli_main


def visible_devices(device: str, visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES that leaves only `device` (cuda or cuda:N, N counted among the GPUs already
    visible), so that the engine is built on it: TensorRT builds on the process's current GPU."""
    match = re.fullmatch(r"cuda(?::(\d+))?", device)
    if match is None:
        raise UserError(f"--device {device}: TensorRT builds on a GPU: cuda or cuda:N")
    index = int(match[1] or 0)
    gpus = [g.strip() for g in visible.split(",") if g.strip()] if visible is not None else None
    if gpus is None:
        return str(index)
    if index >= len(gpus):
        raise UserError(f"--device {device}: CUDA_VISIBLE_DEVICES={visible} leaves {len(gpus)} GPU(s)")
    return gpus[index]


@cli_main("build_engine")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build_engine", description=__doc__.split("\n")[0])
    parser.add_argument("onnx", help="dlshogi-convention ONNX (export/onnx_export.py)")
    parser.add_argument("--out-dir", default=None, help="engine cache folder (default: next to the ONNX)")
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--opt-batch", type=int, default=None, help="profile's optimum (default max/2)")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp16")
    parser.add_argument("--workspace-gb", type=float, default=4.0)
    parser.add_argument("--timing-cache", default=None, help="load/save here (default: in the out dir)")
    parser.add_argument("--device", default="cuda", help="the GPU to build on (and for): cuda or cuda:N")
    args = parser.parse_args(argv)
    if args.workspace_gb <= 0:
        raise UserError("--workspace-gb must be positive")
    os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices(args.device, os.environ.get("CUDA_VISIBLE_DEVICES"))
    path = build_cached_engine(
        args.onnx,
        args.out_dir,
        args.max_batch,
        args.opt_batch,
        args.precision,
        args.workspace_gb,
        args.timing_cache,
    )
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
