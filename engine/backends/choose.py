"""Choosing and building an evaluator from a model file: the only place that knows the runtimes.

A model is a .pt checkpoint (ours or dlshogi's), a dlshogi-convention .onnx, or a serialized TensorRT
.engine/.plan. `auto` picks TensorRT when it imports and a GPU exists (building and caching the engine),
else CUDA torch, else the faster CPU runtime as measured by bench/inference.py.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.console import say
from engine.errors import UserError
from engine.paths import MODELS_DIR

if TYPE_CHECKING:  # the runtimes load only when one is chosen: BACKENDS and the paths stay light
    from engine.backends.evaluator import Evaluator

DEFAULT_MODEL = MODELS_DIR / "default.pt"
BACKENDS = ("auto", "torch", "onnx", "trt")
ENGINE_SUFFIXES = (".engine", ".plan", ".trt")
# bench/inference.py on 2 CPU cores: onnxruntime beats torch on CPU at every batch size for the
# tiny/small/resnet10 presets (models/README.md), so auto uses it for checkpoints on CPU.
CPU_PREFERS = "onnx"


def _log_stderr(msg: str) -> None:
    say(msg)


def _no_stage(doing: str, note: str = "") -> None:
    """create_evaluator's default: nobody follows the steps of the build."""


def default_model_path() -> Path | None:
    """The shipped model, or None while the project has none (callers then use a random-init net)."""
    return DEFAULT_MODEL if DEFAULT_MODEL.is_file() else None


def default_cache_dir() -> Path:
    """Where exported ONNX files and TensorRT engines are cached ($GUMBEL_SHOGI_CACHE, else the user's
    cache folder, else the temp folder): never next to a possibly read-only model."""
    env = os.environ.get("GUMBEL_SHOGI_CACHE")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    for root in (base, Path(tempfile.gettempdir())):
        path = root / "gumbel-shogi"
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(path, os.W_OK):
            return path
    raise UserError("no writable cache folder; set GUMBEL_SHOGI_CACHE")


def model_kind(path: Path | None) -> str:
    """'checkpoint' (also for None: the shipped or random-init network), 'onnx' or 'engine'."""
    if path is None:
        return "checkpoint"
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        return "onnx"
    if suffix in ENGINE_SUFFIXES:
        return "engine"
    return "checkpoint"


@dataclass(frozen=True)
class Platform:
    """What this machine offers; probed once, injectable in tests."""

    cuda: bool
    tensorrt: bool
    ort_providers: tuple[str, ...]
    cpu_prefers: str = CPU_PREFERS
    gpus: int | None = None  # CUDA devices of this host (None: not counted)


def _cuda_driver_present() -> bool:
    """Whether NVIDIA's driver library loads: without it there is no CUDA, and torch (seconds to import)
    need not be asked."""
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll", "libcuda.dylib"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def probe_platform(device: str | None = None) -> Platform:
    """A device of 'cpu' rules out the GPU paths whatever is installed."""
    import importlib.util

    from engine.backends.onnx_evaluator import available_providers

    cuda = not (device or "").startswith("cpu") and _cuda_driver_present() and _torch_sees_cuda()
    tensorrt = cuda and importlib.util.find_spec("tensorrt") is not None
    gpus = _torch_gpu_count() if cuda else 0
    return Platform(cuda=cuda, tensorrt=tensorrt, ort_providers=tuple(available_providers()), gpus=gpus)


def _torch_sees_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _torch_gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def device_index(device: str | None, platform: Platform) -> int:
    """The CUDA device number of 'cuda'/'cuda:N' (0 otherwise); a number beyond the host's GPUs is one
    line, not a CUDA error from deep inside a runtime."""
    if not device or not device.startswith("cuda"):
        return 0
    index = int(device.split(":")[1]) if ":" in device else 0
    if platform.gpus is not None and index >= platform.gpus:
        have = f"cuda:0..cuda:{platform.gpus - 1}" if platform.gpus else "none"
        raise UserError(f"device {device} requested but this host has {platform.gpus} CUDA GPU(s) ({have})")
    return index


@dataclass(frozen=True)
class Choice:
    backend: str  # torch | onnx | trt
    device: str  # cpu | cuda
    providers: tuple[str, ...] = ()  # onnxruntime providers, in order
    why: str = ""


def _onnx_providers(platform: Platform) -> tuple[tuple[str, ...], str]:
    if platform.cuda and "CUDAExecutionProvider" in platform.ort_providers:
        return ("CUDAExecutionProvider", "CPUExecutionProvider"), "cuda"
    return ("CPUExecutionProvider",), "cpu"


def choose_backend(requested: str, kind: str, platform: Platform) -> Choice:
    """Pure decision: which runtime serves a model of `kind` here, and why (for the log line)."""
    if requested not in BACKENDS:
        raise UserError(f"unknown backend {requested!r} (choose from {', '.join(BACKENDS)})")
    if kind == "engine" and requested not in ("auto", "trt"):
        raise UserError(f"a TensorRT engine runs only on the trt backend, not {requested}")
    if requested == "torch" and kind == "onnx":
        raise UserError("the torch backend needs a .pt checkpoint, not an ONNX file (use --backend onnx)")
    if requested == "trt" or kind == "engine":
        if not platform.cuda:
            raise UserError("the TensorRT backend needs a CUDA GPU and none is available")
        if not platform.tensorrt:
            raise UserError("the TensorRT backend needs the tensorrt package (pip install tensorrt)")
        return Choice("trt", "cuda", why="requested" if requested == "trt" else "model is a TensorRT engine")
    if requested == "torch":
        return Choice("torch", "cuda" if platform.cuda else "cpu", why="requested")
    if requested == "onnx":
        providers, device = _onnx_providers(platform)
        return Choice("onnx", device, providers, why="requested")
    # auto
    if platform.cuda and platform.tensorrt:
        return Choice("trt", "cuda", why="auto: CUDA GPU and TensorRT available")
    if platform.cuda:
        if kind == "onnx":
            providers, device = _onnx_providers(platform)
            return Choice("onnx", device, providers, why=f"auto: ONNX model, onnxruntime on {device}")
        return Choice("torch", "cuda", why="auto: CUDA GPU without TensorRT")
    if kind == "onnx" or platform.cpu_prefers == "onnx":
        why = "auto: no GPU; ONNX model" if kind == "onnx" else "auto: no GPU; onnxruntime is faster on CPU"
        return Choice("onnx", "cpu", ("CPUExecutionProvider",), why=why)
    return Choice("torch", "cpu", why="auto: no GPU; torch is faster on CPU")


def create_evaluator(
    model: str | os.PathLike | None = None,
    backend: str = "auto",
    max_batch: int = 256,
    device: str | None = None,
    log: Callable[[str], None] = _log_stderr,
    *,
    threads: int | None = None,
    fp16: bool | None = None,
    cuda_graphs: bool = False,
    engine_dir: str | os.PathLike | None = None,
    platform: Platform | None = None,
    activation: str | None = None,
    int8: bool = False,
    stage: Callable[[str, str], None] = _no_stage,
) -> Evaluator:
    """Build the evaluator for `model` (.pt, .onnx or TensorRT engine; None = shipped default, else a
    random-init 'small' net) and log the choice once as `info string backend ...`.

    threads: CPU intra-op threads; fp16: None = on for GPUs; cuda_graphs: torch CUDA only;
    engine_dir: cache for exported ONNX and built engines (default: default_cache_dir());
    activation: relu|swish for a dlshogi checkpoint/npz that does not say (None/'auto': from the file);
    int8: on onnxruntime's CPU path, run the model quantized to int8 (engine/backends/int8.py);
    stage(doing, note): called as each step of the build begins (the USI engine tells a GUI what a long
    first start is doing: ONNX export, int8 calibration, TensorRT build, each cached in `note`)."""
    activation = None if activation in (None, "auto") else activation
    path = Path(model) if model is not None else default_model_path()
    if path is not None and not path.is_file():
        raise UserError(f"{path}: model not found")
    platform = platform or probe_platform(device)
    if device and device.startswith("cuda") and not platform.cuda:
        raise UserError(f"device {device} requested but no CUDA GPU is available")
    device_index(device, platform)
    choice = choose_backend(backend, model_kind(path), platform)
    source = (
        f"model {path}"
        if path is not None
        else "no model given and none shipped: random-init 'small' (seed 0)"
    )
    cache = Path(engine_dir) if engine_dir is not None else None

    def build(choice: Choice) -> Evaluator:
        return _build(
            choice, path, max_batch, device, threads, fp16, cuda_graphs, cache, log, activation, int8, stage,
            platform,
        )  # fmt: skip

    ev, choice = _with_fallback(choice, build, model_kind(path), backend == "auto", platform)
    log(f"info string backend {ev.name}: {choice.why}; {source}")
    return ev


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def _with_fallback(
    choice: Choice, build: Callable[[Choice], Evaluator], kind: str, auto: bool, platform: Platform
) -> tuple[Evaluator, Choice]:
    """Build `choice`; when `auto` chose a GPU runtime that fails to start (a broken TensorRT or CUDA
    install, too old a driver), auto's choice without it (TensorRT -> CUDA without TensorRT -> the CPU),
    the reason in its `why`. A runtime asked for by name, or an engine file, fails with its own error."""
    failures: list[str] = []
    while True:
        try:
            return build(choice), choice
        except Exception as e:
            if not auto or kind == "engine" or choice.device != "cuda":
                raise
            failed = "TensorRT" if choice.backend == "trt" else f"{choice.backend} on CUDA"
            failures.append(f"{failed} failed ({_first_line(e)})")
            platform = dataclasses.replace(platform, tensorrt=False, cuda=choice.backend == "trt")
            following = choose_backend("auto", kind, platform)
            choice = dataclasses.replace(following, why=f"{following.why}, after {'; '.join(failures)}")


def _int8(
    onnx_path: Path,
    cache: Path,
    threads: int | None,
    providers: list[str],
    log: Callable[[str], None],
    stage: Callable[[str, str], None],
) -> Path:
    """The int8 model of `onnx_path` (quantized once, then cached); the model itself, with a logged
    reason, when it cannot be quantized."""
    from engine.backends.int8 import cached_int8
    from engine.backends.onnx_evaluator import OnnxEvaluator

    def fp32(batch: int) -> OnnxEvaluator:
        return OnnxEvaluator(onnx_path, batch, threads=threads, providers=providers)

    try:
        return cached_int8(onnx_path, cache, fp32, stage)
    except Exception as e:
        log(f"info string int8: cannot quantize {onnx_path.name} ({_first_line(e)}); running it unquantized")
        return onnx_path


def _network(path: Path | None, activation: str | None):
    from engine.core.network import build, load_model, preset

    return build(preset("small"), seed=0) if path is None else load_model(path, activation)


def _exported(
    path: Path | None, activation: str | None, cache: Path, stage: Callable[[str, str], None], fp16: bool
) -> Path:
    """The ONNX file of checkpoint `path` (None: the random-init net), exported into `cache` on first use;
    found again without loading the checkpoint (no torch on a warm start)."""
    from engine.backends.onnx_files import exported_onnx_path, onnx_tag

    if path is not None and (known := exported_onnx_path(path, activation, cache, onnx_tag(fp16))).is_file():
        return known
    from engine.backends.onnx_model import cached_onnx

    net = _network(path, activation)
    stage("exporting the model to ONNX", f"one-time, cached in {cache}")
    return cached_onnx(net, path, cache, fp16=fp16, activation=activation)


def _build(
    choice: Choice,
    path: Path | None,
    max_batch: int,
    device: str | None,
    threads: int | None,
    fp16: bool | None,
    cuda_graphs: bool,
    cache: Path | None,
    log: Callable[[str], None],
    activation: str | None,
    int8: bool,
    stage: Callable[[str, str], None],
    platform: Platform,
) -> Evaluator:
    kind = model_kind(path)
    if int8 and (choice.backend, choice.device) != ("onnx", "cpu"):
        log(f"info string int8 runs on the onnx backend on a CPU, not {choice.backend} on {choice.device}")
    if choice.backend == "torch":
        from engine.backends.torch_evaluator import TorchEvaluator

        dev = device if device and device.startswith(choice.device) else choice.device
        return TorchEvaluator(
            _network(path, activation), max_batch, dev, fp16=fp16, cuda_graphs=cuda_graphs, threads=threads
        )
    if choice.backend == "onnx":
        from engine.backends.onnx_evaluator import OnnxEvaluator

        cache = cache or default_cache_dir()
        # no torch for an ONNX model: it runs on onnxruntime alone
        onnx_path = path if kind == "onnx" else _exported(path, activation, cache, stage, fp16=False)
        providers = list(choice.providers)
        if int8 and choice.device == "cpu":
            stage("looking up the int8 model", f"cached in {cache}")  # calibrating, if not there
            onnx_path = _int8(onnx_path, cache, threads, providers, log, stage)
        stage("starting onnxruntime", "")
        return OnnxEvaluator(onnx_path, max_batch, threads=threads, providers=providers)
    from engine.backends.trt_build import build_cached_engine, has_fp16_flag, import_tensorrt
    from engine.backends.trt_evaluator import TrtEvaluator

    dev_index = device_index(device, platform)
    if kind == "engine":
        return TrtEvaluator(path, max_batch, dev_index)
    cache = cache or default_cache_dir()
    precision = "fp32" if fp16 is False else "fp16"
    if kind == "onnx":
        onnx_path = path
    else:
        typed16 = precision == "fp16" and not has_fp16_flag(import_tensorrt())
        onnx_path = _exported(path, activation, cache, stage, fp16=typed16)
    stage("building the TensorRT engine", f"one-time, cached in {cache}")
    engine = build_cached_engine(
        onnx_path,
        cache,
        max_batch=max_batch,
        precision=precision,
        log=lambda m: log(f"info string {m}"),
        device=dev_index,
    )
    stage("starting TensorRT", "")
    return TrtEvaluator(engine, max_batch, dev_index)
