"""FP32 ONNX -> FP16-typed ONNX for TensorRT 11: dlshogi's own exports and the shipped model convert,
keep dlshogi's float32 interface and an FP32 value head, agree with FP32 on the CPU well inside the
tolerance, are cached by the source's hash, and a conversion that disagrees is refused, leaving nothing."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from engine.backends import fp16_onnx as f16
from engine.backends.onnx_model import write_onnx
from engine.core.network import load_model
from engine.errors import UserError

REPO = Path(__file__).resolve().parent.parent
DLSHOGI = REPO.parent / "shared" / "interop" / "dlshogi"


@pytest.fixture(scope="module")
def shipped_onnx(tmp_path_factory) -> Path:
    return write_onnx(
        load_model(REPO / "models" / "default.pt"), tmp_path_factory.mktemp("m") / "default.onnx"
    )


def sources(shipped: Path) -> dict[str, Path]:
    found = {"shipped": shipped}
    for name in ("train-r5x64s.onnx", "train-r5x64s-legacy.onnx"):  # external .data / single file
        if (DLSHOGI / name).is_file():
            found[name] = DLSHOGI / name
    return found


def test_conversions_agree_and_keep_the_interface(shipped_onnx, tmp_path):
    found = sources(shipped_onnx)
    for name, source in found.items():
        path = f16.fp16_onnx(source, tmp_path, log=lambda m: None)
        figures = json.loads(path.with_name(path.name + ".json").read_text())
        # a tenth of the tolerance: FP16 keeps ~3 digits; a conversion gone wrong is far above
        assert figures["policy_max_abs"] < f16.POLICY_TOLERANCE / 10, (name, figures)
        assert figures["value_max_abs"] < f16.VALUE_TOLERANCE / 10, (name, figures)
        assert figures["top1_agree"] >= 0.95, (name, figures)
        assert f16.fp16_typed(path) and not f16.fp16_typed(source)
        graph = onnx.load(str(path)).graph
        assert [i.name for i in graph.input] == ["input1", "input2"]
        assert {v.type.tensor_type.elem_type for v in [*graph.input, *graph.output]} == {
            onnx.TensorProto.FLOAT
        }
        head = set(f16.value_head_nodes(onnx.load(str(source), load_external_data=False).graph))
        assert head, name
        for node in graph.node:  # the value head computes in FP32: no half-precision weights feed it
            if node.name in head and node.op_type in ("Gemm", "MatMul", "Conv"):
                weights = {t.name: t.data_type for t in graph.initializer}
                assert all(
                    weights.get(i, onnx.TensorProto.FLOAT) == onnx.TensorProto.FLOAT for i in node.input
                )
    if len(found) < 3:
        pytest.skip("dlshogi fixtures missing (../shared): only the shipped model was converted")


def test_cached_by_the_sources_hash(shipped_onnx, tmp_path):
    said: list[str] = []
    first = f16.fp16_onnx(shipped_onnx, tmp_path, log=said.append)
    stamp = first.stat().st_mtime_ns
    assert (
        f16.fp16_onnx(shipped_onnx, tmp_path, log=said.append) == first and first.stat().st_mtime_ns == stamp
    )
    assert len(said) == 1 and "converting default.onnx to FP16" in said[0]
    first.with_name(first.name + ".json").unlink()  # no sidecar: not vouched for, converted again
    assert f16.fp16_onnx(shipped_onnx, tmp_path, log=said.append) == first and len(said) == 2


def test_a_conversion_that_disagrees_is_refused(shipped_onnx, tmp_path, monkeypatch):
    monkeypatch.setattr(f16, "POLICY_TOLERANCE", 0.0)
    with pytest.raises(UserError, match=r"its FP16 conversion disagrees with it .*--precision fp32"):
        f16.fp16_onnx(shipped_onnx, tmp_path, log=lambda m: None)
    assert list(tmp_path.iterdir()) == []
