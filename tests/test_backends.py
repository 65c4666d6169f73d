"""Inference backends: torch CPU and onnxruntime agree on real positions; backend choice; refusals."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from engine.backends import choose
from engine.backends.choose import Platform, choose_backend, create_evaluator, model_kind
from engine.backends.onnx_evaluator import OnnxEvaluator
from engine.backends.onnx_model import cached_onnx, write_onnx
from engine.backends.torch_evaluator import TorchEvaluator, bucket_size
from engine.core.features import set_nyugyoku_features
from engine.core.network import PolicyValueNetwork, build, preset, save_checkpoint
from engine.errors import UserError

# The tests export with the legacy exporter on purpose (as dlshogi does); its deprecation is noise here.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CPU = Platform(cuda=False, tensorrt=False, ort_providers=("CPUExecutionProvider",))


def trained_like(name: str, seed: int = 0, **overrides) -> PolicyValueNetwork:
    """A random network whose BatchNorm statistics are not the identity (as after training), so the
    comparison exercises BN folding, not just convolutions."""
    net = build(preset(name, **overrides), seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
    return net.eval()


def assert_agree(a, b, policy_tol: float, value_tol: float) -> None:
    (pa, va), (pb, vb) = a, b
    assert pa.shape == pb.shape and va.shape == vb.shape
    assert np.abs(pa - pb).max() <= policy_tol * max(1.0, np.abs(pb).max())
    assert np.abs(va - vb).max() <= value_tol
    assert ((va > 0) & (va < 1)).all()


@pytest.mark.parametrize("name,count,max_batch", [("tiny", 70, 16), ("small", 40, 32), ("resnet10", 2, 2)])
def test_onnxruntime_agrees_with_torch(name, count, max_batch, positions, tmp_path):
    net = trained_like(name)
    path = write_onnx(net, tmp_path / f"{name}.onnx")
    boards = positions[:count]
    with OnnxEvaluator(path, max_batch=max_batch, threads=1) as ev:
        got = ev.evaluate_boards(boards)
        assert ev.name == "onnx-cpu-t1"
    with TorchEvaluator(net, max_batch=max_batch) as ref:
        want = ref.evaluate_boards(boards)
    assert_agree(got, want, 1e-4, 1e-5)


def test_evaluate_uses_filled_rows_only(positions, tmp_path):
    """evaluate(n) reads rows 0..n-1 of the host buffers; stale rows beyond n do not matter."""
    net = trained_like("tiny")
    with OnnxEvaluator(write_onnx(net, tmp_path / "t.onnx"), max_batch=8) as ev:
        full = ev.evaluate_boards(positions[:8])
        ev.x1[3:] = 7.0
        from engine.core.features import fill_features

        for i, board in enumerate(positions[:3]):
            fill_features(board, ev.x1[i], ev.x2[i])
        policy, value = ev.evaluate(3)
        np.testing.assert_allclose(policy, full[0][:3], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(value, full[1][:3], rtol=1e-5, atol=1e-6)
        with pytest.raises(ValueError):
            ev.evaluate(9)


def test_nyugyoku_features_variant(positions, tmp_path):
    """119-plane input2 (dlshogi's nyugyoku features) flows through export and both evaluators."""
    try:
        net = trained_like("tiny", input2=119)
        path = write_onnx(net, tmp_path / "n.onnx")
        with OnnxEvaluator(path, max_batch=8) as ev:
            assert ev.input2 == 119
            got = ev.evaluate_boards(positions[:10])
        with TorchEvaluator(net, max_batch=8) as ref:
            want = ref.evaluate_boards(positions[:10])
        assert_agree(got, want, 1e-4, 1e-5)
    finally:
        set_nyugyoku_features(False)


def export_renamed(tmp_path: Path, input_names, output_names, dynamic=True) -> Path:
    net = build(preset("tiny"), seed=0).eval()
    from engine.core.network import WithSigmoid

    path = tmp_path / "odd.onnx"
    axes = {n: {0: "batch_size"} for n in [*input_names, *output_names]} if dynamic else None
    torch.onnx.export(
        WithSigmoid(net),
        (torch.zeros(2, 62, 9, 9), torch.zeros(2, 57, 9, 9)),
        str(path),
        input_names=input_names,
        output_names=output_names,
        dynamic_axes=axes,
        dynamo=False,
    )
    return path


@pytest.mark.parametrize(
    "inputs,outputs,dynamic,message",
    [
        (["x", "y"], ["output_policy", "output_value"], True, "not a dlshogi-convention network"),
        (["input1", "input2"], ["policy", "value"], True, "not a dlshogi-convention network"),
        (["input1", "input2"], ["output_policy", "output_value"], False, "fixed batch size 2"),
    ],
)
def test_onnx_evaluator_refuses_other_conventions(tmp_path, inputs, outputs, dynamic, message):
    path = export_renamed(tmp_path, inputs, outputs, dynamic)
    with pytest.raises(UserError, match=message) as err:
        OnnxEvaluator(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_onnx_evaluator_refuses_garbage_and_missing(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not protobuf")
    with pytest.raises(UserError, match="onnxruntime cannot load it"):
        OnnxEvaluator(bad)
    with pytest.raises(UserError, match="not found"):
        OnnxEvaluator(tmp_path / "missing.onnx")


def test_bucket_sizes():
    assert [bucket_size(n, 256) for n in (1, 2, 3, 5, 64, 65, 200, 256)] == [1, 2, 4, 8, 64, 128, 256, 256]
    assert bucket_size(100, 100) == 100


def test_model_kind():
    assert model_kind(None) == "checkpoint"
    assert model_kind(Path("a/b.pt")) == "checkpoint"
    assert model_kind(Path("m.ONNX")) == "onnx"
    assert model_kind(Path("m.plan")) == model_kind(Path("m.engine")) == "engine"


GPU = Platform(cuda=True, tensorrt=False, ort_providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
GPU_TRT = Platform(cuda=True, tensorrt=True, ort_providers=("CPUExecutionProvider",))


@pytest.mark.parametrize(
    "requested,kind,platform,backend,device",
    [
        ("auto", "checkpoint", GPU_TRT, "trt", "cuda"),
        ("auto", "onnx", GPU_TRT, "trt", "cuda"),
        ("auto", "engine", GPU_TRT, "trt", "cuda"),
        ("auto", "checkpoint", GPU, "torch", "cuda"),
        ("auto", "onnx", GPU, "onnx", "cuda"),
        ("auto", "onnx", CPU, "onnx", "cpu"),
        ("auto", "checkpoint", CPU, "onnx", "cpu"),
        (
            "auto",
            "checkpoint",
            Platform(False, False, ("CPUExecutionProvider",), cpu_prefers="torch"),
            "torch",
            "cpu",
        ),
        ("torch", "checkpoint", GPU_TRT, "torch", "cuda"),
        ("torch", "checkpoint", CPU, "torch", "cpu"),
        ("onnx", "checkpoint", GPU_TRT, "onnx", "cpu"),  # no CUDA provider in this onnxruntime
        ("onnx", "onnx", GPU, "onnx", "cuda"),
        ("trt", "checkpoint", GPU_TRT, "trt", "cuda"),
    ],
)
def test_choose_backend(requested, kind, platform, backend, device):
    choice = choose_backend(requested, kind, platform)
    assert (choice.backend, choice.device) == (backend, device)
    assert choice.why
    if backend == "onnx":
        assert choice.providers[-1] == "CPUExecutionProvider"


@pytest.mark.parametrize(
    "requested,kind,platform,message",
    [
        ("torch", "onnx", CPU, "needs a .pt checkpoint"),
        ("onnx", "engine", GPU_TRT, "only on the trt backend"),
        ("trt", "checkpoint", CPU, "needs a CUDA GPU"),
        ("trt", "onnx", GPU, "needs the tensorrt package"),
        ("auto", "engine", GPU, "needs the tensorrt package"),
        ("cuda", "checkpoint", CPU, "unknown backend"),
    ],
)
def test_choose_backend_refusals(requested, kind, platform, message):
    with pytest.raises(UserError, match=message):
        choose_backend(requested, kind, platform)


def test_create_evaluator_from_checkpoint(positions, tmp_path, monkeypatch):
    monkeypatch.setenv("GUMBEL_SHOGI_CACHE", str(tmp_path / "cache"))
    net = trained_like("tiny")
    ckpt = tmp_path / "m.pt"
    save_checkpoint(ckpt, net)
    lines: list[str] = []
    with create_evaluator(ckpt, "torch", max_batch=8, log=lines.append, platform=CPU) as ev:
        want = ev.evaluate_boards(positions[:12])
        assert ev.name == "torch-cpu"
    assert len(lines) == 1 and lines[0].startswith("info string backend torch-cpu: requested; model ")
    for _ in range(2):  # the second start reuses the cached ONNX
        lines.clear()
        with create_evaluator(ckpt, "auto", max_batch=8, log=lines.append, platform=CPU) as ev:
            assert ev.name.startswith("onnx-cpu")
            assert_agree(ev.evaluate_boards(positions[:12]), want, 1e-4, 1e-5)
        assert len(lines) == 1 and "auto: no GPU" in lines[0]
    assert len(list((tmp_path / "cache").glob("*.onnx"))) == 1


def test_create_evaluator_default_and_onnx_model(positions, tmp_path, monkeypatch):
    monkeypatch.setenv("GUMBEL_SHOGI_CACHE", str(tmp_path / "cache"))
    lines: list[str] = []
    with create_evaluator(None, "onnx", max_batch=4, log=lines.append, platform=CPU, threads=1) as ev:
        assert ev.evaluate_boards(positions[:4])[0].shape == (4, 2187)
    assert "onnx-cpu" in lines[0]
    onnx_path = cached_onnx(trained_like("tiny"), None, tmp_path)
    with create_evaluator(onnx_path, log=lines.append, platform=CPU) as ev:
        assert ev.name == "onnx-cpu"
    with pytest.raises(UserError, match="needs a .pt checkpoint"):
        create_evaluator(onnx_path, "torch", platform=CPU)
    with pytest.raises(UserError, match="model not found"):
        create_evaluator(tmp_path / "nope.pt", platform=CPU)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("graphs", [False, True])
def test_torch_cuda_fp16_agrees_with_cpu(positions, graphs):
    net = trained_like("small")
    with TorchEvaluator(net, max_batch=64) as ref:
        want = ref.evaluate_boards(positions[:50])
    with TorchEvaluator(trained_like("small"), max_batch=64, device="cuda", cuda_graphs=graphs) as ev:
        for n in (1, 3, 50):  # several buckets, padded
            got = ev.evaluate_boards(positions[:n])
            assert_agree(got, (want[0][:n], want[1][:n]), 2e-2, 5e-3)


def test_cuda_device_without_gpu_is_refused():
    with pytest.raises(UserError, match="no CUDA GPU"):
        create_evaluator(None, "torch", device="cuda", platform=CPU)


def test_a_gpu_beyond_the_hosts_is_one_line():
    two = dataclasses.replace(GPU, gpus=2)
    assert choose.device_index("cuda:1", two) == 1 and choose.device_index("cuda", two) == 0
    with pytest.raises(
        UserError, match=r"^device cuda:2 requested but this host has 2 CUDA GPU\(s\) \(cuda:0..cuda:1\)$"
    ):
        create_evaluator(None, "torch", 8, device="cuda:2", platform=two)


def test_auto_falls_back_down_the_chain_saying_why():
    """Auto's GPU runtimes that fail to start give way, TensorRT -> torch CUDA -> the CPU, each failure
    in the final choice's reason; a runtime asked for by name fails with its own error."""
    tried = []

    def build(choice):
        tried.append((choice.backend, choice.device))
        if choice.device == "cuda":
            raise UserError(f"{choice.backend} cannot start\nsecond line")
        return "cpu evaluator"

    ev, choice = choose._with_fallback(choose.Choice("trt", "cuda"), build, "checkpoint", True, GPU_TRT)
    assert ev == "cpu evaluator" and tried == [("trt", "cuda"), ("torch", "cuda"), ("onnx", "cpu")]
    assert choice.why.endswith(
        "after TensorRT failed (trt cannot start); torch on CUDA failed (torch cannot start)"
    )
    with pytest.raises(UserError, match="trt cannot start"):
        choose._with_fallback(choose.Choice("trt", "cuda"), build, "checkpoint", False, GPU_TRT)
    with pytest.raises(UserError, match="trt cannot start"):  # an engine file runs on TensorRT or not at all
        choose._with_fallback(choose.Choice("trt", "cuda"), build, "engine", True, GPU_TRT)
