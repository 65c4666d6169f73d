"""An FP32 ONNX made FP16-typed, for TensorRT builds without an FP16 builder flag.

TensorRT 11 removed `BuilderFlag.FP16`: its networks are strongly typed, so an engine computes in the
ONNX's own types. A foreign FP32 model (dlshogi's, say) is therefore converted once with onnxruntime's
float16 converter (`onnxruntime.transformers.float16`, the maintained copy of onnxconverter-common's:
onnxruntime is already a dependency, and it brings no protobuf pin), with the inputs and outputs kept
float32 so dlshogi's interface holds, and the value head (every node only `output_value` depends on)
kept FP32, where half precision loses win rates near 0 and 1. The result is cached by the source's
hash (graph and external weights) and checked once against the FP32 model on onnxruntime's CPU
provider, over positions of seeded random games: a conversion that disagrees is refused, never served.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from engine.errors import UserError
from engine.fileio import atomic_write_bytes, atomic_write_text

# Largest allowed differences between the FP16 and the FP32 model on the probe positions: move
# probabilities (softmax of the policy logits) and win probabilities. FP16 keeps about three decimal
# digits; the dlshogi fixtures and the shipped model stay below a tenth of these (tests/test_fp16_onnx.py).
POLICY_TOLERANCE = 0.02
VALUE_TOLERANCE = 0.01
PROBE_POSITIONS = 64
CONVERTER = "onnxruntime.transformers.float16 keep_io_types"


def fp16_typed(path: str | Path) -> bool:
    """Whether the model already computes in FP16 (FP16 inputs, as `onnx_export --fp16` writes, or FP16
    weights, as a converted model has): then it is built as it is."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    half = onnx.TensorProto.FLOAT16
    return any(i.type.tensor_type.elem_type == half for i in graph.input) or any(
        t.data_type == half for t in graph.initializer
    )


def value_head_nodes(graph) -> list[str]:
    """Names of the nodes only `output_value` depends on (the value head, up to the trunk)."""

    def ancestors(output: str) -> set[int]:
        producer = {out: i for i, node in enumerate(graph.node) for out in node.output}
        seen, todo = set(), [output]
        while todo:
            i = producer.get(todo.pop())
            if i is not None and i not in seen:
                seen.add(i)
                todo.extend(graph.node[i].input)
        return seen

    only_value = ancestors("output_value") - ancestors("output_policy")
    return [graph.node[i].name for i in sorted(only_value)]


def convert(source: Path):
    """The FP16-typed twin of `source` as an in-memory ONNX model (I/O float32, value head FP32)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(source))  # external weights are read from beside it
    for i, node in enumerate(model.graph.node):
        node.name = node.name or f"node{i}"  # the block list names nodes
    return convert_float_to_float16(model, keep_io_types=True, node_block_list=value_head_nodes(model.graph))


def probe_features(planes2: int, n: int = PROBE_POSITIONS, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features of `n` positions from seeded random legal games (openings to middle games)."""
    import cshogi

    from engine.core.features import FEATURES1_NUM

    rng = np.random.default_rng(seed)
    x1 = np.zeros((n, FEATURES1_NUM, 9, 9), np.float32)
    x2 = np.zeros((n, planes2, 9, 9), np.float32)
    board = cshogi.Board()
    for i in range(n):
        if i % 8 == 0:
            board.reset()
        for _ in range(int(rng.integers(1, 12))):
            moves = list(board.legal_moves)
            if not moves or board.is_game_over():
                board.reset()
                moves = list(board.legal_moves)
            board.push(moves[int(rng.integers(len(moves)))])
        board._dlshogi_make_input_features(x1[i], x2[i])
    return x1, x2


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def agreement(fp32: Path, fp16: Path) -> dict:
    """The two models on the probe positions, onnxruntime on the CPU: largest differences of move and
    win probabilities, and the share of positions whose likeliest move is the same."""
    from engine.backends.onnx_evaluator import OnnxEvaluator

    with OnnxEvaluator(fp32, PROBE_POSITIONS) as a, OnnxEvaluator(fp16, PROBE_POSITIONS) as b:
        x1, x2 = probe_features(a.input2)
        p32, v32 = a.evaluate_features(x1, x2)
        p16, v16 = b.evaluate_features(x1, x2)
    q32, q16 = _softmax(p32), _softmax(p16)
    return {
        "positions": len(x1),
        "policy_max_abs": float(np.abs(q32 - q16).max()),
        "value_max_abs": float(np.abs(v32 - v16).max()),
        "top1_agree": float((q32.argmax(1) == q16.argmax(1)).mean()),
    }


def fp16_onnx(source: str | Path, cache_dir: str | Path, log: Callable[[str], None] = print) -> Path:
    """The checked FP16-typed twin of FP32 ONNX `source` in `cache_dir`, converted on first use. Its JSON
    sidecar (written last) records the source's hash and the agreement measured; without it the
    conversion is redone."""
    from engine.backends.onnx_files import onnx_sha256

    source = Path(source)
    sha = onnx_sha256(source)
    path = Path(cache_dir) / f"{sha[:24]}-fp16.onnx"
    sidecar = path.with_name(path.name + ".json")
    try:
        if path.is_file() and json.loads(sidecar.read_text()).get("source_sha256") == sha:
            return path
    except (OSError, ValueError):
        pass
    log(f"converting {source.name} to FP16 for TensorRT ({CONVERTER}); checking it against FP32 on CPU")
    model = convert(source)
    atomic_write_bytes(path, model.SerializeToString())
    try:
        figures = agreement(source, path)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    if figures["policy_max_abs"] > POLICY_TOLERANCE or figures["value_max_abs"] > VALUE_TOLERANCE:
        path.unlink(missing_ok=True)
        raise UserError(
            f"{source}: its FP16 conversion disagrees with it (move probabilities by up to "
            f"{figures['policy_max_abs']:.4f}, win probabilities by {figures['value_max_abs']:.4f}; allowed "
            f"{POLICY_TOLERANCE}, {VALUE_TOLERANCE}); build it with --precision fp32"
        )
    record = {"source": str(source), "source_sha256": sha, "converter": CONVERTER, **figures}
    atomic_write_text(sidecar, json.dumps(record, indent=1) + "\n")
    return path
