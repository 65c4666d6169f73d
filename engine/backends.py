"""Choosing and building an evaluator from a model file: the only place that knows the runtimes."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from engine.errors import UserError
from engine.evaluator import Evaluator

REPO_ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO_ROOT / "models"
DEFAULT_MODEL = MODELS_DIR / "default.pt"
BACKENDS = ("auto", "torch", "onnx", "trt")


def _log_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def default_model_path() -> Path | None:
    """The shipped model, or None while the project has none (callers then use a random-init net)."""
    return DEFAULT_MODEL if DEFAULT_MODEL.is_file() else None


def create_evaluator(
    model: str | os.PathLike | None = None,
    backend: str = "auto",
    max_batch: int = 256,
    device: str | None = None,
    log: Callable[[str], None] = _log_stderr,
) -> Evaluator:
    """Build the evaluator for `model` (a .pt checkpoint; None = shipped default) and log the choice."""
    from engine.backend_torch import TorchEvaluator
    from engine.network import build, load_model, preset

    if backend not in BACKENDS:
        raise UserError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    path = Path(model) if model is not None else default_model_path()
    if path is None:
        net = build(preset("small"), seed=0)
        why = "no model given and none shipped: random-init 'small' network (seed 0)"
    else:
        net = load_model(path)
        why = f"model {path}"
    ev = TorchEvaluator(net, max_batch=max_batch, device=device or "cpu")
    log(f"info string backend {ev.name}: {why}")
    return ev
