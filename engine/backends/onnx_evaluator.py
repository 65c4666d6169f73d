"""onnxruntime evaluator: the CPU path for any dlshogi-convention ONNX, plus CUDA/TensorRT providers
when the installed onnxruntime has them. FP16-typed models are fed and read through casts."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from engine.backends.evaluator import Evaluator
from engine.backends.int8 import PRECISION_KEY
from engine.backends.io_spec import INPUT_NAMES, OUTPUT_NAMES, TensorSpec, check_convention
from engine.errors import UserError

ORT_TYPES = {"tensor(float)": np.dtype(np.float32), "tensor(float16)": np.dtype(np.float16)}


def available_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def _spec(arg) -> TensorSpec:
    shape = tuple(d if isinstance(d, int) and d > 0 else None for d in (arg.shape or ()))
    return TensorSpec(arg.name, shape, ORT_TYPES.get(arg.type, np.dtype(object)))


def _model_path(path: Path) -> str:
    """The model is handed to onnxruntime by absolute path, never as bytes: a model with external
    weights (dlshogi's export on torch >= 2.9 writes NAME.onnx.data) finds them beside it from any cwd."""
    if not path.is_file():
        raise UserError(f"{path}: ONNX model not found")
    return str(path.resolve())


class OnnxEvaluator(Evaluator):
    def __init__(
        self,
        path: str | os.PathLike,
        max_batch: int = 256,
        threads: int | None = None,
        providers: list[str] | None = None,
    ) -> None:
        """`threads`: intra-op threads (None = onnxruntime's default, all cores); `providers`: in order
        of preference, default CPU only (GPU providers are chosen explicitly by create_evaluator)."""
        import onnxruntime as ort

        self.path = Path(path)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.inter_op_num_threads = 1
        if threads:
            opts.intra_op_num_threads = threads
        opts.log_severity_level = 3
        providers = providers or ["CPUExecutionProvider"]
        missing = [p for p in providers if p not in ort.get_available_providers()]
        if missing:
            raise UserError(f"{self.path}: onnxruntime here lacks {', '.join(missing)}")
        try:
            self.session = ort.InferenceSession(_model_path(self.path), opts, providers=providers)
        except UserError:
            raise
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise UserError(f"{self.path}: onnxruntime cannot load it ({first[:200]})") from None
        inputs = [_spec(a) for a in self.session.get_inputs()]
        outputs = [_spec(a) for a in self.session.get_outputs()]
        input2 = check_convention(inputs, outputs, str(self.path))
        super().__init__(max_batch, input2)
        types = {s.name: s.dtype for s in [*inputs, *outputs]}
        self._in_types = [types[n] for n in INPUT_NAMES]
        self.fp16 = types["input1"] == np.float16
        self.provider = self.session.get_providers()[0]
        short = self.provider.removesuffix("ExecutionProvider").lower()
        quantized = self.session.get_modelmeta().custom_metadata_map.get(PRECISION_KEY) == "int8"
        precision = "-int8" if quantized else "-fp16" if self.fp16 else ""
        self.name = f"onnx-{short}{precision}" + (f"-t{threads}" if threads else "")

    def _run(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        feeds = {
            name: (x[:n] if dt == np.float32 else x[:n].astype(dt))
            for name, x, dt in zip(INPUT_NAMES, (self.x1, self.x2), self._in_types, strict=True)
        }
        policy, value = self.session.run(list(OUTPUT_NAMES), feeds)
        return policy.astype(np.float32, copy=False), value.astype(np.float32, copy=False).reshape(-1)
