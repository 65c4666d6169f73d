"""ONNX files on disk: content hashes that key the caches of derived models (TensorRT engines, int8
models). No torch here: an ONNX model runs, and is quantized, without it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


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
