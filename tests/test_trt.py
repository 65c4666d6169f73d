"""TensorRT: the engine cache key and staleness rules (pure, everywhere); build and agreement with
PyTorch where tensorrt imports and a GPU exists (skipped with the reason elsewhere)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

from engine.backends.trt_build import (
    KEY_FIELDS,
    engine_cache_key,
    engine_file_name,
    find_engine,
    read_sidecar,
    sidecar_mismatch,
    sidecar_path,
    store_engine,
)
from engine.backends.trt_evaluator import check_engine_sidecar
from engine.errors import UserError

HAVE_TRT = importlib.util.find_spec("tensorrt") is not None
KEY = engine_cache_key("ab" * 32, "NVIDIA H100 80GB HBM3", "10.3.0", 256, "fp16", "fp16-flag")


def test_key_holds_every_field():
    assert tuple(KEY) == KEY_FIELDS
    with pytest.raises(UserError, match="unknown precision"):
        engine_cache_key("00", "gpu", "10", 8, "int8", "fp32")
    with pytest.raises(UserError, match="unknown TensorRT build"):
        engine_cache_key("00", "gpu", "10", 8, "fp16", "fp16-magic")


@pytest.mark.parametrize(
    "field,value",
    [("model_sha256", "cd" * 32), ("gpu", "NVIDIA H200"), ("tensorrt", "11.0.0"), ("max_batch", 128),
     ("precision", "fp32"), ("build", "fp16-typed")],
)  # fmt: skip
def test_every_field_changes_the_name(field, value):
    other = {**KEY, field: value}
    assert engine_file_name(other) != engine_file_name(KEY)
    assert sidecar_mismatch(KEY, other) == [field]


def test_file_name_is_filesystem_safe():
    name = engine_file_name(
        engine_cache_key("ab" * 32, "NVIDIA GeForce RTX 4090 / (rev a)", "10.3.0", 64, "fp16", "fp16-typed")
    )
    assert "/" not in name and " " not in name and name.endswith("-b64-fp16-typed.engine")


def test_find_engine_trusts_only_a_matching_sidecar(tmp_path):
    assert find_engine(tmp_path, KEY) is None
    path = store_engine(tmp_path, KEY, b"engine bytes")
    assert path.read_bytes() == b"engine bytes" and read_sidecar(path) == KEY
    assert find_engine(tmp_path, KEY) == path
    # foreign: same file name, sidecar says another GPU (e.g. a copied cache folder)
    sidecar_path(path).write_text(json.dumps({**KEY, "gpu": "Tesla T4"}))
    assert find_engine(tmp_path, KEY) is None
    # stale or broken sidecars are not trusted either
    sidecar_path(path).write_text("{not json")
    assert find_engine(tmp_path, KEY) is None
    sidecar_path(path).unlink()
    assert find_engine(tmp_path, KEY) is None
    # a rebuild replaces both
    store_engine(tmp_path, KEY, b"rebuilt")
    assert find_engine(tmp_path, KEY).read_bytes() == b"rebuilt"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, sidecar_path(path).name])


def test_given_engine_checked_against_this_machine(tmp_path):
    path = tmp_path / "dlshogi.engine"
    path.write_bytes(b"x")
    assert "no sidecar" in check_engine_sidecar(path, "NVIDIA H100 80GB HBM3", "10.3.0")
    store_engine(tmp_path, KEY, b"x")
    ours = tmp_path / engine_file_name(KEY)
    assert "matches" in check_engine_sidecar(ours, KEY["gpu"], KEY["tensorrt"])
    with pytest.raises(UserError, match="built for gpu='NVIDIA H100 80GB HBM3'"):
        check_engine_sidecar(ours, "Tesla T4", KEY["tensorrt"])
    with pytest.raises(UserError, match="tensorrt='10.3.0'"):
        check_engine_sidecar(ours, KEY["gpu"], "11.0.0")


@pytest.mark.skipif(HAVE_TRT, reason="tensorrt is installed: the missing-TensorRT message cannot be shown")
def test_build_engine_cli_without_tensorrt(repo, tmp_path):
    onnx_path = tmp_path / "m.onnx"
    onnx_path.write_bytes(b"")
    result = subprocess.run(
        [sys.executable, str(repo / "export" / "build_engine.py"), str(onnx_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "TensorRT is not installed" in lines[0] and "Traceback" not in result.stderr
    assert "--backend" not in lines[0]  # build_engine.py has no such option


needs_trt = pytest.mark.skipif(
    not (HAVE_TRT and torch.cuda.is_available()),
    reason="needs the tensorrt package and a CUDA GPU" + ("" if HAVE_TRT else " (tensorrt not installed)"),
)


@needs_trt
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_trt_engine_agrees_with_torch(tmp_path, positions):
    from engine.backends.onnx_model import write_onnx
    from engine.backends.torch_evaluator import TorchEvaluator
    from engine.backends.trt_build import build_cached_engine
    from engine.backends.trt_evaluator import TrtEvaluator
    from tests.test_backends import assert_agree, trained_like

    net = trained_like("small")
    onnx_path = write_onnx(net, tmp_path / "m.onnx")  # FP32: TensorRT 11 builds it through the conversion
    engine = build_cached_engine(onnx_path, tmp_path, max_batch=64, opt_batch=32)
    assert build_cached_engine(onnx_path, tmp_path, max_batch=64, opt_batch=32) == engine  # cached
    with TorchEvaluator(net, max_batch=64) as ref:
        want = ref.evaluate_boards(positions[:100])
    with TrtEvaluator(engine, max_batch=64) as ev:
        for n in (1, 7, 64, 100):
            got = ev.evaluate_boards(positions[:n])
            assert_agree(got, (want[0][:n], want[1][:n]), 3e-2, 1e-2)
    with pytest.raises(UserError, match="allows batches up to 64"):
        TrtEvaluator(engine, max_batch=128)
