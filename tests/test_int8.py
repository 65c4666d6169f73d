"""The int8 CPU model: quantized once and cached, close to the fp32 net on positions it reaches, and
refused with a reason (running unquantized) where quantization does not apply."""

from __future__ import annotations

import cshogi
import numpy as np
import pytest

from engine.backends.choose import CPU_PREFERS, DEFAULT_MODEL, create_evaluator
from engine.backends.int8 import own_games
from engine.backends.onnx_model import write_onnx
from engine.core.moves import legal_moves_and_labels
from engine.core.network import build, preset

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """fp32 and int8 evaluators of the shipped model, sharing one cache folder."""
    cache = tmp_path_factory.mktemp("int8-cache")
    logs: list[str] = []
    fp32 = create_evaluator(DEFAULT_MODEL, backend="onnx", max_batch=32, engine_dir=cache, log=logs.append)
    int8 = create_evaluator(
        DEFAULT_MODEL, backend="onnx", max_batch=32, engine_dir=cache, log=logs.append, int8=True
    )
    return fp32, int8, cache, logs


def test_quantized_once_then_loaded_from_the_cache(shipped):
    _, int8, cache, logs = shipped
    assert int8.name == "onnx-cpu-int8" and "backend onnx-cpu-int8" in logs[-1]
    (quantized,) = cache.glob("*-int8-*.onnx")
    stamp = quantized.stat().st_mtime_ns
    again = create_evaluator(
        DEFAULT_MODEL, backend="onnx", max_batch=8, engine_dir=cache, log=print, int8=True
    )
    assert again.name == "onnx-cpu-int8" and quantized.stat().st_mtime_ns == stamp
    assert not list(cache.glob(".*.tmp"))  # written atomically: no temp file left


def test_int8_chooses_the_moves_and_values_of_the_fp32_net(shipped):
    """On positions of the network's own games (another seed than the calibration games) the int8
    net's best move is the fp32 net's in the large majority, and its win rates are close."""
    fp32, int8, _, _ = shipped
    rows = list(own_games(fp32, games=16, plies=32, seed=3))
    sfens = [s for r in rows for s in r[0]]
    x1, x2 = np.concatenate([r[1] for r in rows]), np.concatenate([r[2] for r in rows])
    p32, v32 = fp32.evaluate_features(x1, x2)
    p8, v8 = int8.evaluate_features(x1, x2)
    same = [
        p32[i][labels].argmax() == p8[i][labels].argmax()
        for i, labels in enumerate(legal_moves_and_labels(cshogi.Board(s))[1] for s in sfens)
    ]
    assert np.mean(same) >= 0.85
    assert np.abs(v32 - v8).mean() < 0.03
    assert not np.allclose(p32, p8)  # it is a different (quantized) model, not the fp32 one again


def test_where_int8_does_not_apply_the_model_runs_unquantized_and_says_why(tmp_path):
    fp16 = write_onnx(build(preset("tiny"), seed=0), tmp_path / "half.onnx", fp16=True)
    logs: list[str] = []
    ev = create_evaluator(fp16, backend="onnx", max_batch=4, engine_dir=tmp_path, log=logs.append, int8=True)
    assert ev.name == "onnx-cpu-fp16"
    assert any("int8: cannot quantize half.onnx" in line and "typed FP16" in line for line in logs), logs
    logs.clear()
    ev = create_evaluator(None, backend="torch", max_batch=4, engine_dir=tmp_path, log=logs.append, int8=True)
    assert ev.name.startswith("torch") and any("int8 runs on the onnx backend" in line for line in logs)
    assert CPU_PREFERS == "onnx"  # so Backend auto on a CPU is where int8 applies
