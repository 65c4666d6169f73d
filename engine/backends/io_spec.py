"""dlshogi's served-network I/O convention, checked the same way for ONNX files and TensorRT engines.

input1 [N, 62, 9, 9], input2 [N, 57|119, 9, 9], output_policy [N, 2187] logits, output_value [N, 1]
sigmoid probability; N is dynamic (`batch_size`). float32 or float16 per tensor (FP16-typed exports).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.core.features import FEATURES1_NUM, FEATURES2_NUM, FEATURES2_NYUGYOKU_NUM
from engine.core.moves import NUM_MOVE_LABELS
from engine.errors import UserError

INPUT_NAMES = ("input1", "input2")
OUTPUT_NAMES = ("output_policy", "output_value")
BATCH_AXIS = "batch_size"
SERVED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


@dataclass(frozen=True)
class TensorSpec:
    """One I/O tensor as a runtime reports it; a dynamic dimension is None."""

    name: str
    shape: tuple[int | None, ...]
    dtype: np.dtype


def _expect(spec: TensorSpec, tail: tuple[int, ...], source: str) -> None:
    if len(spec.shape) != 1 + len(tail) or tuple(spec.shape[1:]) != tail:
        want = "[N, " + ", ".join(map(str, tail)) + "]"
        got = "[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]"
        raise UserError(f"{source}: {spec.name} has shape {got}, expected {want} (dlshogi convention)")
    if spec.shape[0] is not None:
        raise UserError(
            f"{source}: {spec.name} has a fixed batch size {spec.shape[0]}; "
            f"re-export with a dynamic '{BATCH_AXIS}' axis (export/onnx_export.py does)"
        )
    if np.dtype(spec.dtype) not in SERVED_DTYPES:
        raise UserError(f"{source}: {spec.name} is {np.dtype(spec.dtype).name}, expected float32 or float16")


def check_convention(inputs: list[TensorSpec], outputs: list[TensorSpec], source: str) -> int:
    """Refuse anything but dlshogi's I/O convention with a one-line UserError; return input2's planes."""
    in_names = sorted(s.name for s in inputs)
    out_names = {s.name for s in outputs}
    if in_names != sorted(INPUT_NAMES) or not set(OUTPUT_NAMES) <= out_names:
        raise UserError(
            f"{source}: not a dlshogi-convention network (inputs {in_names}, outputs {sorted(out_names)}; "
            f"expected inputs {list(INPUT_NAMES)} and outputs {list(OUTPUT_NAMES)})"
        )
    by_name = {s.name: s for s in [*inputs, *outputs]}
    planes2 = by_name["input2"].shape[1] if len(by_name["input2"].shape) == 4 else None
    if planes2 not in (FEATURES2_NUM, FEATURES2_NYUGYOKU_NUM):
        planes2 = FEATURES2_NUM  # let _expect name the bad shape
    _expect(by_name["input1"], (FEATURES1_NUM, 9, 9), source)
    _expect(by_name["input2"], (planes2, 9, 9), source)
    _expect(by_name["output_policy"], (NUM_MOVE_LABELS,), source)
    _expect(by_name["output_value"], (1,), source)
    return int(planes2)
