"""export/onnx_export.py: dlshogi interface, verification against PyTorch, FP16 typing, CLI errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest

from engine.backends.onnx_evaluator import OnnxEvaluator
from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.network import save_checkpoint
from engine.core.position import random_positions
from export.onnx_export import export_onnx
from tests.test_backends import trained_like

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

NAMES = ["input1", "input2", "output_policy", "output_value"]


def io_types(model: onnx.ModelProto) -> dict[str, int]:
    return {t.name: t.type.tensor_type.elem_type for t in [*model.graph.input, *model.graph.output]}


def test_export_fp32_verified(tmp_path):
    net = trained_like("tiny")
    ckpt = tmp_path / "m.pt"
    save_checkpoint(ckpt, net)
    report = export_onnx(ckpt, tmp_path / "m.onnx", positions=16)
    assert report.ok and report.positions == 16
    assert 0 <= report.policy_max_abs < 1e-3 and 0 <= report.value_max_abs < 1e-4
    model = onnx.load(str(report.path))
    onnx.checker.check_model(model)
    for t in [*model.graph.input, *model.graph.output]:
        assert t.type.tensor_type.shape.dim[0].dim_param == "batch_size"
    assert set(io_types(model).values()) == {onnx.TensorProto.FLOAT}
    assert sorted(io_types(model)) == sorted(NAMES)


def test_onnx_value_is_a_sigmoid_probability_at_any_batch_size(tmp_path, positions):
    """What dlshogi-convention tools expect: output_value = sigmoid(value logit), any batch size."""
    import onnxruntime as ort
    import torch

    from engine.core.features import features_from_boards

    net = trained_like("tiny")
    report = export_onnx(net, tmp_path / "m.onnx", verify=False)
    session = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    for n in (1, 7):
        x1, x2 = features_from_boards(positions[:n])
        policy, value = session.run(["output_policy", "output_value"], {"input1": x1, "input2": x2})
        with torch.no_grad():
            want_policy, logit = net(torch.from_numpy(x1), torch.from_numpy(x2))
        assert policy.shape == (n, 2187) and value.shape == (n, 1)
        np.testing.assert_allclose(value, torch.sigmoid(logit).numpy(), atol=1e-6)
        np.testing.assert_allclose(policy, want_policy.numpy(), atol=1e-4)


def test_export_fp16_typed_keeps_value_head_fp32(tmp_path, positions):
    net = trained_like("small")
    report = export_onnx(net, tmp_path / "h.onnx", fp16=True, positions=16)
    assert report.ok, report
    model = onnx.load(str(report.path))
    types = io_types(model)
    assert types["input1"] == types["input2"] == types["output_policy"] == onnx.TensorProto.FLOAT16
    assert types["output_value"] == onnx.TensorProto.FLOAT
    weights = {i.name: i.data_type for i in model.graph.initializer}
    assert weights["net.value_fc1.weight"] == weights["net.value_fc2.weight"] == onnx.TensorProto.FLOAT
    assert onnx.TensorProto.FLOAT16 in weights.values()
    # served through onnxruntime CPU with casts; close to PyTorch FP32 at FP16 accuracy
    with OnnxEvaluator(report.path, max_batch=32) as ev:
        assert ev.fp16 and ev.name == "onnx-cpu-fp16"
        policy, value = ev.evaluate_boards(positions[:40])
    with TorchEvaluator(net, max_batch=32) as ref:
        ref_policy, ref_value = ref.evaluate_boards(positions[:40])
    assert policy.dtype == value.dtype == np.float32
    assert np.abs(policy - ref_policy).max() < 3e-2 * max(1.0, np.abs(ref_policy).max())
    assert np.abs(value - ref_value).max() < 1e-2


def test_failed_verification_writes_nothing(tmp_path):
    out = tmp_path / "m.onnx"
    out.write_bytes(b"previous")
    report = export_onnx(trained_like("tiny"), out, fp16=True, positions=4, tolerance=1e-9)
    assert not report.ok and "FAILED" in str(report)
    assert out.read_bytes() == b"previous"


def test_random_positions_are_varied():
    boards = random_positions(20, seed=3)
    assert len({b.sfen() for b in boards}) > 15
    assert {b.turn for b in boards} == {0, 1}


def run_cli(repo, *args, cwd):
    return subprocess.run(
        [sys.executable, str(repo / "export" / "onnx_export.py"), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_cli_exports_from_any_cwd(repo, tmp_path):
    ckpt = tmp_path / "m.pt"
    save_checkpoint(ckpt, trained_like("tiny"))
    result = run_cli(repo, ckpt, tmp_path / "m.onnx", "--positions", "8", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "max abs diff" in result.stdout and "ok" in result.stdout
    assert (tmp_path / "m.onnx").is_file()


@pytest.mark.parametrize("content", [b"not a checkpoint at all", None])
def test_cli_refuses_unloadable_checkpoint(repo, tmp_path, content):
    ckpt = tmp_path / "broken.pt"
    if content is not None:
        ckpt.write_bytes(content)
    result = run_cli(repo, ckpt, tmp_path / "out.onnx", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnx_export: error:") and str(ckpt) in lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.onnx").exists()
