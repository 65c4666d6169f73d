#!/usr/bin/env python3
"""Positions/s per inference backend and batch size on this machine, with torch CPU FP32 as the baseline.

Runs torch CPU, onnxruntime CPU at a couple of thread counts, and torch CUDA (FP16, with and without
CUDA graphs) / TensorRT when available, for the 'tiny' and 'small' presets and resnet10 at two batch
sizes. Inputs are features of real positions from random legal games.

    python bench/inference.py            # ~2-3 minutes on 2 cores
    python bench/inference.py --quick    # fewer sizes, shorter timing
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from engine.backends.evaluator import Evaluator  # noqa: E402
from engine.backends.onnx_evaluator import OnnxEvaluator, available_providers  # noqa: E402
from engine.backends.onnx_model import write_onnx  # noqa: E402
from engine.backends.torch_evaluator import TorchEvaluator  # noqa: E402
from engine.core.features import features_from_boards  # noqa: E402
from engine.core.network import build, preset  # noqa: E402
from engine.core.position import random_positions  # noqa: E402


def positions_per_second(ev: Evaluator, x1: np.ndarray, x2: np.ndarray, batch: int, seconds: float) -> float:
    """Fill the host buffers and evaluate repeatedly (after one warm-up call) for about `seconds`."""
    ev.x1[:batch] = x1[:batch]
    ev.x2[:batch] = x2[:batch]
    ev.evaluate(batch)
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or done == 0:
        ev.evaluate(batch)
        done += batch
    return done / elapsed


def evaluators(net, onnx_path: Path, max_batch: int, quick: bool):
    """(label, factory) for every backend this machine offers."""
    cores = os.cpu_count() or 1
    threads = sorted({1, cores}) if not quick else [cores]
    yield (
        "torch-cpu-fp32 (baseline)",
        lambda: TorchEvaluator(net, max_batch, "cpu", fp16=False, threads=cores),
    )
    if cores > 1 and not quick:
        yield "torch-cpu-fp32 t=1", lambda: TorchEvaluator(net, max_batch, "cpu", fp16=False, threads=1)
    for t in threads:
        yield f"onnxruntime-cpu t={t}", lambda t=t: OnnxEvaluator(onnx_path, max_batch, threads=t)
    if torch.cuda.is_available():
        yield "torch-cuda-fp16", lambda: TorchEvaluator(net, max_batch, "cuda", fp16=True)
        yield (
            "torch-cuda-fp16+graphs",
            lambda: TorchEvaluator(net, max_batch, "cuda", fp16=True, cuda_graphs=True),
        )
        if "CUDAExecutionProvider" in available_providers():
            yield (
                "onnxruntime-cuda",
                lambda: OnnxEvaluator(
                    onnx_path, max_batch, providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
                ),
            )
        try:  # the engines' own way: FP16 by the builder flag (TensorRT 10) or a typed ONNX (11)
            from engine.backends.choose import create_evaluator

            built = create_evaluator(onnx_path, "trt", max_batch, engine_dir=onnx_path.parent, log=print)
            built.close()
            yield (
                built.name,
                lambda: create_evaluator(
                    onnx_path, "trt", max_batch, engine_dir=onnx_path.parent, log=lambda m: None
                ),
            )
        except Exception as e:  # said, not hidden: TensorRT is what a GPU user runs
            print(f"  tensorrt: not measured: {str(e).splitlines()[0][:200]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and shorter timing")
    parser.add_argument("--seconds", type=float, default=None, help="timing per measurement")
    args = parser.parse_args()
    seconds = args.seconds or (0.4 if args.quick else 1.0)
    plans = [("tiny", [1, 8, 32, 128, 512]), ("small", [1, 8, 32, 128, 512]), ("resnet10", [8, 128])]
    if args.quick:
        plans = [("tiny", [1, 32, 512]), ("small", [1, 32, 256]), ("resnet10", [32])]
    print(f"cpu cores {os.cpu_count()}, torch threads {torch.get_num_threads()}, torch {torch.__version__}, "
          f"cuda {torch.cuda.is_available()}, onnxruntime providers {available_providers()}")  # fmt: skip
    x1, x2 = features_from_boards(
        random_positions(max(b for _, sizes in plans for b in sizes), max_plies=120)
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name, sizes in plans:
            net = build(preset(name), seed=0).eval()
            onnx_path = write_onnx(net, Path(tmp) / f"{name}.onnx")
            print(f"\n== {name}: positions/s (x baseline) ==")
            print(f"{'backend':28s}" + "".join(f"{'b=' + str(b):>16s}" for b in sizes))
            baseline: dict[int, float] = {}
            for label, factory in evaluators(net, onnx_path, max(sizes), args.quick):
                with factory() as ev:
                    cells = []
                    for b in sizes:
                        rate = positions_per_second(ev, x1, x2, b, seconds)
                        baseline.setdefault(b, rate)
                        cells.append(f"{rate:9.0f} x{rate / baseline[b]:4.2f}")
                    print(f"{label:28s}" + "".join(f"{c:>16s}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
