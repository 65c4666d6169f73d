"""TensorRT engines: the cache key that decides whether a built engine may be trusted, and the build.

An engine is only valid for the model, GPU, TensorRT version, maximum batch and precision it was built
for, and the way its FP16 was reached (`build_plan`: the builder's FP16 flag on TensorRT 10, a strongly
typed FP16 ONNX on TensorRT 11, which has no flag); each cached engine carries a JSON sidecar with
exactly those keys, and any mismatch means rebuild.
The GPU is named with its compute capability (`gpu_identity`), so the GPUs of a mixed host or cluster
each get their own engine, and identical GPUs share one. Builders of the same engine take a file lock
beside it: a second process (another GPU of the same model, another self-play run) waits and then
loads the first one's engine instead of building it again or racing it to the file.
Every entry point that builds (export/build_engine.py, the trt backend, the loop, the benchmark) calls
`build_cached_engine`. tensorrt is imported lazily; a library that cannot start (no driver, too old a
driver) is one line naming the TensorRT version, its CUDA major and the driver it needs.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.fileio import atomic_write_bytes, atomic_write_text

PRECISIONS = ("fp16", "fp32")
# How an engine's precision was reached: BuilderFlag.FP16 over an FP32 ONNX (TensorRT 10), a strongly
# typed build of an FP16-typed ONNX (TensorRT 11 has no flag), or FP32.
BUILDS = ("fp16-flag", "fp16-typed", "fp32")
KEY_FIELDS = ("model_sha256", "gpu", "tensorrt", "max_batch", "precision", "build")


def engine_cache_key(
    model_sha256: str, gpu: str, tensorrt: str, max_batch: int, precision: str, build: str
) -> dict:
    """Everything an engine depends on, as stored in its sidecar."""
    if precision not in PRECISIONS:
        raise UserError(f"unknown precision {precision!r} (choose from {', '.join(PRECISIONS)})")
    if build not in BUILDS:
        raise UserError(f"unknown TensorRT build {build!r} (choose from {', '.join(BUILDS)})")
    return {"model_sha256": model_sha256, "gpu": gpu, "tensorrt": tensorrt, "max_batch": int(max_batch),
            "precision": precision, "build": build}  # fmt: skip


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "unknown"


def _precision_tag(key: dict) -> str:
    """'fp16-flag', 'fp16-typed', 'fp32': the precision, and how it was reached where that differs."""
    build, precision = key["build"], key["precision"]
    return build if build.split("-")[0] == precision else f"{precision}-{build}"


def engine_file_name(key: dict) -> str:
    """Readable and unique per key: sha prefix, GPU, TensorRT version, batch, precision."""
    return (
        f"{key['model_sha256'][:16]}-{_slug(key['gpu'])}-trt{_slug(key['tensorrt'])}"
        f"-b{key['max_batch']}-{_precision_tag(key)}.engine"
    )


def sidecar_path(engine: Path) -> Path:
    return engine.with_name(engine.name + ".json")


def read_sidecar(engine: Path) -> dict | None:
    try:
        data = json.loads(sidecar_path(engine).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def sidecar_mismatch(sidecar: dict | None, key: dict, fields: tuple[str, ...] = KEY_FIELDS) -> list[str]:
    """Fields on which a stored engine differs from what is wanted ('sidecar' if there is none)."""
    if sidecar is None:
        return ["sidecar"]
    return [f for f in fields if sidecar.get(f) != key[f]]


def find_engine(out_dir: Path, key: dict) -> Path | None:
    """The cached engine for `key`, or None when missing, stale or foreign (then it must be rebuilt)."""
    path = Path(out_dir) / engine_file_name(key)
    if path.is_file() and not sidecar_mismatch(read_sidecar(path), key):
        return path
    return None


def store_engine(out_dir: Path, key: dict, data: bytes) -> Path:
    """Engine first, sidecar last (both atomic): a sidecar never vouches for a missing engine."""
    path = Path(out_dir) / engine_file_name(key)
    atomic_write_bytes(path, data)
    atomic_write_text(sidecar_path(path), json.dumps(key, indent=1) + "\n")
    return path


def import_tensorrt() -> Any:
    try:
        import tensorrt as trt
    except ImportError as e:
        raise UserError(
            f"TensorRT is not installed ({e}): pip install -e '.[gpu]' (docs/backends.md), or run the model "
            "with the onnx or torch backend instead"
        ) from None
    return trt


# The NVIDIA driver each CUDA major of TensorRT's wheels needs at least (NVIDIA's support matrix).
DRIVER_FLOORS = {12: "r535", 13: "r580"}


def tensorrt_cuda_major() -> int | None:
    """The CUDA major the installed TensorRT wheels were built for (tensorrt-cu12-* or -cu13-*)."""
    import importlib.metadata

    for dist in importlib.metadata.distributions():
        match = re.fullmatch(r"tensorrt[-_]cu(\d+)(?:[-_](?:libs|bindings))?", dist.metadata["Name"] or "")
        if match:
            return int(match[1])
    return None


def tensorrt_start_error(trt: Any, what: str) -> UserError:
    """One line for a TensorRT object the library could not create (pybind's 'factory function returned
    nullptr'): the version, its CUDA major and the driver that needs."""
    major = tensorrt_cuda_major()
    build = f"CUDA {major}" if major else "its CUDA build"
    floor = DRIVER_FLOORS.get(major, "a recent")
    return UserError(
        f"TensorRT {trt.__version__} ({build}) could not create its {what}: it needs a CUDA GPU and NVIDIA "
        f"driver {floor} or newer; check nvidia-smi, or install the TensorRT for its CUDA (docs/backends.md)"
    )


def create(trt: Any, factory: str, *args: Any) -> Any:
    """trt.<factory>(*args), with a failure to start the library as one line instead of a TypeError."""
    try:
        return getattr(trt, factory)(*args)
    except TypeError as e:
        if "nullptr" in str(e):
            raise tensorrt_start_error(trt, factory) from None
        raise


def device_context(device: int) -> Any:
    """A context making CUDA device `device` current (torch's, else pycuda's primary context): TensorRT
    builds, deserialises and runs on the current device."""
    import contextlib

    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.device(device)
    except ImportError:
        pass
    try:
        import pycuda.driver as cuda
    except ImportError:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def pushed():
        cuda.init()
        context = cuda.Device(device).retain_primary_context()
        context.push()
        try:
            yield
        finally:
            cuda.Context.pop()

    return pushed()


def gpu_name(device: int = 0) -> str:
    """The CUDA device's name via torch, else pycuda; UserError when there is no GPU."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(device)
    except ImportError:
        pass
    try:
        import pycuda.driver as cuda

        cuda.init()
        return cuda.Device(device).name()
    except Exception:
        raise UserError("no CUDA GPU found (TensorRT needs one)") from None


def compute_capability(device: int = 0) -> str:
    """The CUDA device's compute capability as 'smXY' via torch, else pycuda; UserError without a GPU."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(device)
            return f"sm{major}{minor}"
    except ImportError:
        pass
    try:
        import pycuda.driver as cuda

        cuda.init()
        major, minor = cuda.Device(device).compute_capability()
        return f"sm{major}{minor}"
    except Exception:
        raise UserError("no CUDA GPU found (TensorRT needs one)") from None


def gpu_identity(device: int = 0) -> str:
    """What an engine is built for: the device's name and compute capability ('NVIDIA H200 sm90')."""
    return f"{gpu_name(device)} {compute_capability(device)}"


def lock_path(out_dir: Path, key: dict) -> Path:
    return Path(out_dir) / (engine_file_name(key) + ".lock")


def has_fp16_flag(trt: Any) -> bool:
    """TensorRT 10 has BuilderFlag.FP16; TensorRT 11 removed it (strongly typed FP16 ONNX instead)."""
    return hasattr(trt.BuilderFlag, "FP16")


def build_plan(
    trt: Any, onnx_path: Path, precision: str, cache_dir: Path, log: Callable[[str], None] = print
) -> tuple[Path, str]:
    """Which ONNX TensorRT builds from, and how (one of BUILDS), for every entry point: fp16 with the
    builder flag where TensorRT has it (10.x) and the ONNX is FP32; else strongly typed from an FP16-typed
    ONNX, the given one if it is, or its checked conversion (engine/backends/fp16_onnx.py); fp32 as is."""
    from engine.backends.fp16_onnx import fp16_onnx, fp16_typed

    typed = fp16_typed(onnx_path)
    if precision == "fp32":
        if typed:
            raise UserError(f"{onnx_path}: the model is FP16-typed; an fp32 engine needs an FP32 ONNX")
        return onnx_path, "fp32"
    if typed:
        return onnx_path, "fp16-typed"
    if has_fp16_flag(trt):
        return onnx_path, "fp16-flag"
    return fp16_onnx(onnx_path, cache_dir, log), "fp16-typed"


def build_serialized(
    trt: Any,
    onnx_path: Path,
    max_batch: int,
    opt_batch: int,
    build: str,
    workspace_gb: float,
    timing_cache: Path | None,
) -> bytes:
    """Explicit batch, one profile min 1 / opt / max on both inputs, workspace limit, timing cache. `build`
    (from build_plan): 'fp16-flag' sets BuilderFlag.FP16 on a weakly typed network; otherwise the network
    is strongly typed where TensorRT allows it (always on 11.x), so the ONNX's types decide."""
    if build not in BUILDS:
        raise UserError(f"unknown TensorRT build {build!r} (choose from {', '.join(BUILDS)})")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = create(trt, "Builder", logger)
    weakly_typed = build == "fp16-flag" or (build == "fp32" and has_fp16_flag(trt))
    flags = 0 if weakly_typed else 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):  # by path: external weights are found beside it
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise UserError(f"{onnx_path}: TensorRT cannot parse it ({errors[:300]})")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_gb * (1 << 30)))
    if build == "fp16-flag":
        config.set_flag(trt.BuilderFlag.FP16)
    cache_bytes = timing_cache.read_bytes() if timing_cache and timing_cache.is_file() else b""
    config.set_timing_cache(config.create_timing_cache(cache_bytes), False)
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        planes = tuple(tensor.shape)[1:]
        profile.set_shape(tensor.name, (1, *planes), (opt_batch, *planes), (max_batch, *planes))
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise UserError(f"{onnx_path}: TensorRT engine build failed (see the TensorRT log above)")
    if timing_cache is not None:
        atomic_write_bytes(timing_cache, bytes(config.get_timing_cache().serialize()))
    return bytes(serialized)


def build_cached_engine(
    onnx_path: str | os.PathLike,
    out_dir: str | os.PathLike | None = None,
    max_batch: int = 256,
    opt_batch: int | None = None,
    precision: str = "fp16",
    workspace_gb: float = 4.0,
    timing_cache: str | os.PathLike | None = None,
    log=print,
    device: int = 0,
    lock_timeout: float = 3600.0,
) -> Path:
    """Return the engine for this ONNX/GPU/TensorRT/batch/precision, building it only when no valid
    cached one exists; every entry point (build_engine, the backends, the loop, the benchmark) comes
    here. The key's model hash covers the ONNX file and its external weights, the GPU is CUDA device
    `device` (made current for the build), and `build` says how FP16 was reached (build_plan).
    Concurrent builders of one key wait on its lock for up to `lock_timeout` s."""
    from engine.backends.onnx_files import onnx_sha256

    onnx_path = Path(onnx_path)
    if not onnx_path.is_file():
        raise UserError(f"{onnx_path}: ONNX model not found")
    if max_batch < 1 or (opt_batch is not None and not 1 <= opt_batch <= max_batch):
        raise UserError(f"bad batch sizes: need 1 <= opt_batch <= max_batch (got {opt_batch}, {max_batch})")
    trt = import_tensorrt()
    out_dir = Path(out_dir) if out_dir is not None else onnx_path.parent
    source, build = build_plan(trt, onnx_path, precision, out_dir, log)
    key = engine_cache_key(
        onnx_sha256(onnx_path), gpu_identity(device), trt.__version__, max_batch, precision, build
    )
    found = find_engine(out_dir, key)
    if found is not None:
        return found

    def run() -> bytes:
        log(f"building TensorRT {build} engine for {onnx_path} (max batch {max_batch}); this takes a while")
        timing = (
            Path(timing_cache)
            if timing_cache
            else out_dir / f"{_slug(key['gpu'])}-trt{key['tensorrt']}.timing_cache"
        )
        with device_context(device):
            return build_serialized(
                trt, source, max_batch, opt_batch or max(1, max_batch // 2), build, workspace_gb, timing
            )

    return build_once(out_dir, key, run, log, lock_timeout)


def build_once(
    out_dir: Path, key: dict, build: Callable[[], bytes], log=print, timeout: float = 3600.0
) -> Path:
    """The engine for `key`: built by `build` under the key's file lock, unless another process built it
    while this one waited for the lock (then it is loaded, not built again)."""
    from filelock import FileLock, Timeout

    out_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path(out_dir, key)))
    try:
        with lock.acquire(timeout=0):
            return _build_under_lock(out_dir, key, build)
    except Timeout:
        log(f"waiting for another process building {engine_file_name(key)}")
    try:
        with lock.acquire(timeout=timeout):
            found = find_engine(out_dir, key)
            return found if found is not None else _build_under_lock(out_dir, key, build)
    except Timeout:
        raise UserError(
            f"{lock_path(out_dir, key)}: another process has been building this engine for {timeout:g}s"
        ) from None


def _build_under_lock(out_dir: Path, key: dict, build: Callable[[], bytes]) -> Path:
    found = find_engine(out_dir, key)  # finished by a builder that released the lock just now
    return found if found is not None else store_engine(out_dir, key, build())
