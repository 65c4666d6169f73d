"""ONNX files on disk: content hashes that key the caches of derived models (TensorRT engines, int8
models) and of exported checkpoints. No torch here: an ONNX model runs, and is quantized, without it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

DEFAULT_OPSET = 17


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def external_data_files(path: str | os.PathLike) -> list[Path]:
    """The weight files an ONNX model refers to (dlshogi's export on torch >= 2.9 writes NAME.onnx.data)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    names = {
        entry.value
        for tensor in model.graph.initializer
        if tensor.data_location == onnx.TensorProto.EXTERNAL
        for entry in tensor.external_data
        if entry.key == "location"
    }
    return [Path(path).parent / name for name in sorted(names)]


def onnx_sha256(path: str | os.PathLike) -> str:
    """sha256 of a model's graph file and its external weights: two exports sharing a graph file but not
    weights must not share a cached TensorRT engine."""
    extra = external_data_files(path)
    if not extra:
        return sha256_file(path)
    return hashlib.sha256("".join(sha256_file(f) for f in [Path(path), *extra]).encode()).hexdigest()


def onnx_tag(fp16: bool = False, opset: int = DEFAULT_OPSET) -> str:
    """The part of a cached export's name that says how it was exported."""
    return f"{'fp16' if fp16 else 'fp32'}-opset{opset}"


def exported_onnx_path(source: str | os.PathLike, activation: str | None, cache_dir: Path, tag: str) -> Path:
    """Where the ONNX export of checkpoint `source` lives in `cache_dir`: keyed by the file's sha256 and
    the activation it is read with (the same dlshogi file read as relu or swish is two networks), which
    together decide the network, so a warm start finds it without loading the checkpoint (torch)."""
    return Path(cache_dir) / f"{sha256_file(source)[:24]}-{activation or 'as-saved'}-{tag}.onnx"
