#!/usr/bin/env python3
"""ONNX -> TensorRT engine (FP16 by default), cached by model sha256 + GPU + TensorRT version + max
batch + precision with a JSON sidecar; an existing engine whose sidecar does not match is rebuilt.

    python export/build_engine.py model.onnx --max-batch 256 --opt-batch 128
    python export/build_engine.py model-fp16.onnx   # TensorRT 11 (no FP16 flag): FP16-typed ONNX

TensorRT 10 builds FP16 with BuilderFlag.FP16 from an FP32 ONNX; TensorRT 11 removed that flag and
builds a strongly typed network, so give it the FP16-typed ONNX from `onnx_export.py --fp16`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.trt_build import PRECISIONS, build_cached_engine
from engine.errors import UserError, cli_main


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
    args = parser.parse_args(argv)
    if args.workspace_gb <= 0:
        raise UserError("--workspace-gb must be positive")
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
