#!/usr/bin/env bash
# GPU check for the serving path (issues #4, #12), under ~10 minutes on one GPU; installs nothing.
#   bash bench/gpu_check.sh
# Needs CUDA torch, onnx, onnxruntime; TensorRT parts run only when `tensorrt` imports.
# Prints labelled results: FP16 vs FP32 agreement, positions/s per batch size with and without CUDA
# graphs, the search ceiling, self-play rows/s against P search processes sharing one inference server
# (latency model and torch CUDA), TensorRT build + agreement + speed, then the GPU-gated pytest tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export GUMBEL_SHOGI_CACHE="${GUMBEL_SHOGI_CACHE:-$(mktemp -d)}"

echo "=== environment ==="
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi: not available"
python - <<'PY'
import importlib.util, torch, onnxruntime as ort
print(f"torch {torch.__version__}, cuda available {torch.cuda.is_available()}",
      f"({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "")
print("onnxruntime", ort.__version__, ort.get_available_providers())
for mod in ("tensorrt", "pycuda"):
    spec = importlib.util.find_spec(mod)
    print(f"{mod}: {'present' if spec else 'MISSING'}")
PY

echo "=== torch CUDA: FP16 (autocast) vs FP32 agreement on real positions ==="
timeout 240 python - <<'PY'
import sys, torch, numpy as np
if not torch.cuda.is_available():
    print("SKIP: torch has no CUDA device"); sys.exit(0)
from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.network import build, preset
from engine.core.position import random_positions
boards = random_positions(512, seed=1)
def softmax(p):
    e = np.exp(p - p.max(1, keepdims=True)); return e / e.sum(1, keepdims=True)
for name in ("small", "resnet10"):
    net = build(preset(name), seed=0)
    with TorchEvaluator(net, 256, "cpu", fp16=False) as ev:
        p32, v32 = ev.evaluate_boards(boards)
    for graphs in (False, True):
        with TorchEvaluator(build(preset(name), seed=0), 256, "cuda", fp16=True, cuda_graphs=graphs) as ev:
            p16, v16 = ev.evaluate_boards(boards)
        print(f"{name:9s} graphs={graphs!s:5s} max|softmax diff| {np.abs(softmax(p16)-softmax(p32)).max():.2e}  "
              f"max|value diff| {np.abs(v16-v32).max():.2e}  "
              f"argmax agree {(p16.argmax(1)==p32.argmax(1)).mean():.3f}")
PY

echo "=== positions/s per backend and batch size (bench/inference.py --quick) ==="
timeout 300 python bench/inference.py --quick --seconds 1.0 || echo "bench/inference.py exited with $?"

echo "=== self-play positions/s on the GPU (bench/selfplay.py, torch CUDA FP16, small net) ==="
if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  timeout 150 python bench/selfplay.py --device cuda --backend torch --nets small --parallel 256 --games 256 \
    --groups 1,2 --processes 0 --baseline-seconds 5 2>&1 | grep -v "^info" || echo "bench/selfplay.py exited with $?"
else
  echo "SKIP: torch has no CUDA device"
fi

echo "=== search ceiling: zero-cost evaluator, one process (bench/search_ceiling.py) ==="
if [ -f bench/search_ceiling.py ]; then
  # no reference checkout travels to the device: both columns are this checkout
  timeout 150 python bench/search_ceiling.py --ref "$PWD" --repeat 1 --games 32 --max-moves 40 --playouts 1000 \
    || echo "bench/search_ceiling.py exited with $?"
else
  echo "SKIP: bench/search_ceiling.py not in this checkout"
fi

echo "=== many searches per GPU: P self-play processes, one inference server (bench/multiprocess_selfplay.py) ==="
timeout 120 python bench/multiprocess_selfplay.py --processes 1,2,4,8 --games 64 --max-moves 40 2>&1 \
  | grep -v "^info" || echo "bench/multiprocess_selfplay.py (latency model) exited with $?"
if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  timeout 150 python bench/multiprocess_selfplay.py --real --backend torch --device cuda --processes 1,2,4,8 \
    --games 128 --max-moves 40 2>&1 | grep -v "^info" || echo "bench/multiprocess_selfplay.py (torch CUDA) exited with $?"
else
  echo "SKIP: torch has no CUDA device"
fi

echo "=== TensorRT: build + compare with torch FP32 (skipped without tensorrt) ==="
timeout 300 python - <<'PY'
import sys, tempfile, time, importlib.util
import numpy as np, torch
if importlib.util.find_spec("tensorrt") is None or not torch.cuda.is_available():
    print("SKIP: tensorrt not importable or no CUDA device"); sys.exit(0)
from pathlib import Path
from engine.backends.torch_evaluator import TorchEvaluator
from engine.backends.trt_evaluator import TrtEvaluator
from engine.core.network import build, preset
from engine.backends.onnx_model import write_onnx
from engine.backends.trt_build import build_cached_engine, has_fp16_flag, import_tensorrt
from engine.core.position import random_positions
trt = import_tensorrt()
typed16 = not has_fp16_flag(trt)
print(f"TensorRT {trt.__version__}; FP16 via {'FP16-typed ONNX (strongly typed)' if typed16 else 'BuilderFlag.FP16'}")
boards = random_positions(256, seed=2)
with tempfile.TemporaryDirectory() as tmp:
    for name in ("small", "resnet10"):
        net = build(preset(name), seed=0)
        onnx_path = write_onnx(net, Path(tmp) / f"{name}.onnx", fp16=typed16)
        t = time.time(); engine = build_cached_engine(onnx_path, tmp, max_batch=256, opt_batch=128)
        print(f"{name}: engine built in {time.time()-t:.1f}s -> {engine.name}")
        t = time.time(); assert build_cached_engine(onnx_path, tmp, max_batch=256) == engine
        print(f"{name}: cached engine found in {time.time()-t:.2f}s")
        with TorchEvaluator(net, 256, "cpu", fp16=False) as ev:
            p32, v32 = ev.evaluate_boards(boards)
        with TrtEvaluator(engine, 256) as ev:
            p, v = ev.evaluate_boards(boards)
            print(f"{name}: max|policy logit diff| {np.abs(p-p32).max():.2e} max|value diff| {np.abs(v-v32).max():.2e}")
            for b in (1, 8, 32, 128, 256):
                ev.evaluate(b); n = 0; t = time.perf_counter()
                while time.perf_counter() - t < 0.5:
                    ev.evaluate(b); n += b
                print(f"{name}: tensorrt b={b:<4d} {n/(time.perf_counter()-t):10.0f} positions/s")
PY

echo "=== GPU-gated tests ==="
timeout 300 python -m pytest -q tests/test_backends.py tests/test_trt.py -k "cuda or trt" -rs || echo "pytest exited with $?"
echo "=== gpu_check done ==="
