"""TensorRT evaluator (TensorRT 10/11 Python API): a serialized engine, its own CUDA stream, pinned host
buffers, dynamic batch inside the engine's optimization profile, all on the device it serves (made
current around every call). Device memory and streams through torch's CUDA tensors, which every GPU
install of the project has (no compiler, no CUDA headers: the `gpu` extra needs nothing more), or
through pycuda where the optional `pycuda` extra is installed. tensorrt is imported only when this
backend is used."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends.evaluator import Evaluator
from engine.backends.io_spec import INPUT_NAMES, OUTPUT_NAMES, TensorSpec, check_convention
from engine.backends.trt_build import (
    KEY_FIELDS,
    create,
    gpu_identity,
    import_tensorrt,
    read_sidecar,
    sidecar_mismatch,
)
from engine.core.moves import NUM_MOVE_LABELS
from engine.errors import UserError


class _PycudaIO:
    """Device buffers and copies with pycuda on the device's primary context (shared with torch)."""

    def __init__(self, device: int) -> None:
        import pycuda.driver as cuda

        cuda.init()
        self.cuda = cuda
        self.context = cuda.Device(device).retain_primary_context()

    def __enter__(self) -> _PycudaIO:
        self.context.push()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cuda.Context.pop()

    def stream(self) -> Any:
        return self.cuda.Stream()

    def stream_handle(self, stream: Any) -> int:
        return stream.handle

    def host(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return self.cuda.pagelocked_zeros(shape, dtype)

    def device(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        return self.cuda.mem_alloc(int(np.prod(shape)) * np.dtype(dtype).itemsize)

    def address(self, buf: Any) -> int:
        return int(buf)

    def upload(self, dst: Any, src: np.ndarray, stream: Any) -> None:
        self.cuda.memcpy_htod_async(dst, src, stream)

    def download(self, dst: np.ndarray, src: Any, stream: Any) -> None:
        self.cuda.memcpy_dtoh_async(dst, src, stream)

    def sync(self, stream: Any) -> None:
        stream.synchronize()


class _TorchIO:
    """The same operations with torch CUDA tensors (pinned host arrays are views of pinned tensors)."""

    def __init__(self, device: int) -> None:
        import torch

        self.torch = torch
        self.dev = torch.device("cuda", device)
        self._current = torch.cuda.device(self.dev)

    def __enter__(self) -> _TorchIO:
        self._current.__enter__()  # the engine, its context and its stream live on this device
        return self

    def __exit__(self, *exc: object) -> None:
        self._current.__exit__(*exc)

    def stream(self) -> Any:
        return self.torch.cuda.Stream(self.dev)

    def stream_handle(self, stream: Any) -> int:
        return stream.cuda_stream

    def host(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        t = self.torch.from_numpy(np.zeros(shape, dtype)).pin_memory()
        return t.numpy()

    def device(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        return self.torch.from_numpy(np.zeros(shape, dtype)).to(self.dev)

    def address(self, buf: Any) -> int:
        return buf.data_ptr()

    def upload(self, dst: Any, src: np.ndarray, stream: Any) -> None:
        with self.torch.cuda.stream(stream):
            dst.view(-1)[: src.size].copy_(self.torch.from_numpy(src).view(-1), non_blocking=True)

    def download(self, dst: np.ndarray, src: Any, stream: Any) -> None:
        with self.torch.cuda.stream(stream):
            self.torch.from_numpy(dst).view(-1).copy_(src.view(-1)[: dst.size], non_blocking=True)

    def sync(self, stream: Any) -> None:
        stream.synchronize()


def cuda_io(device: int) -> _PycudaIO | _TorchIO:
    try:
        return _PycudaIO(device)
    except ImportError:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            return _TorchIO(device)
    except ImportError:
        pass
    raise UserError("the TensorRT backend needs pycuda or a CUDA build of torch for device memory")


def check_engine_sidecar(path: Path, gpu: str, tensorrt: str) -> str:
    """An engine built elsewhere (other GPU or TensorRT) is refused; one without a sidecar (e.g. built
    by dlshogi) is used as is. Returns a note for the log."""
    sidecar = read_sidecar(path)
    if sidecar is None:
        return "no sidecar, trusted as given"
    wanted = {**sidecar, "gpu": gpu, "tensorrt": tensorrt}
    bad = sidecar_mismatch(sidecar, wanted, KEY_FIELDS)
    if bad:
        built = ", ".join(f"{f}={sidecar.get(f)!r}" for f in bad)
        raise UserError(
            f"{path}: engine was built for {built}, not this machine ({gpu}, TensorRT {tensorrt})"
        )
    return "sidecar matches this GPU and TensorRT"


class TrtEvaluator(Evaluator):
    def __init__(
        self,
        path: str | os.PathLike,
        max_batch: int = 256,
        device: int = 0,
        io: Callable[[int], Any] | None = None,
    ) -> None:
        """`io(device)`: device buffers, copies and streams (cuda_io; tests give a host-memory one)."""
        trt = import_tensorrt()
        self.path = Path(path)
        if not self.path.is_file():
            raise UserError(f"{self.path}: TensorRT engine not found")
        self.note = check_engine_sidecar(self.path, gpu_identity(device), trt.__version__)
        self._io = (io or cuda_io)(device)
        with self._io:
            self._logger = trt.Logger(trt.Logger.WARNING)
            self._runtime = create(trt, "Runtime", self._logger)
            self.engine = self._runtime.deserialize_cuda_engine(self.path.read_bytes())
            if self.engine is None:
                raise UserError(
                    f"{self.path}: TensorRT cannot deserialize it (other version or GPU? rebuild it)"
                )
            specs, profile_max = self._describe(trt)
            input2 = check_convention(
                [s for s in specs if s.name in INPUT_NAMES],
                [s for s in specs if s.name in OUTPUT_NAMES],
                str(path),
            )
            if max_batch > profile_max:
                raise UserError(
                    f"{self.path}: engine's profile allows batches up to {profile_max}, not {max_batch}"
                )
            self._dtypes = {s.name: np.dtype(s.dtype) for s in specs}
            super().__init__(max_batch, input2)
            self.context = self.engine.create_execution_context()
            self.stream = self._io.stream()
            self._host = {"input1": self.x1, "input2": self.x2}
            self._host_policy = self._io.host((max_batch, NUM_MOVE_LABELS), np.float32)
            self._host_value = self._io.host((max_batch, 1), np.float32)
            self._staging: dict[str, np.ndarray] = {}
            self._device: dict[str, Any] = {}
            for s in specs:
                shape = (max_batch, *s.shape[1:])
                self._device[s.name] = self._io.device(shape, s.dtype)
                if s.dtype != np.float32:  # FP16-typed engine: cast through pinned staging buffers
                    self._staging[s.name] = self._io.host(shape, s.dtype)
                self.context.set_tensor_address(s.name, self._io.address(self._device[s.name]))
        fp16 = self._dtypes["input1"] == np.float16
        build = (read_sidecar(self.path) or {}).get("build")
        self.name = "tensorrt" + (f"-{build}" if build else "") + ("-fp16io" if fp16 else "")

    def _alloc_host(self, shape1: tuple[int, ...], shape2: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        return self._io.host(shape1, np.float32), self._io.host(shape2, np.float32)

    def _describe(self, trt: Any) -> tuple[list[TensorSpec], int]:
        """I/O tensors (dynamic dims as None) and the largest batch the profile admits for both inputs."""
        specs, profile_max = [], None
        for i in range(self.engine.num_io_tensors):
            name = self.engine.get_tensor_name(i)
            shape = tuple(None if d < 0 else int(d) for d in self.engine.get_tensor_shape(name))
            specs.append(TensorSpec(name, shape, np.dtype(trt.nptype(self.engine.get_tensor_dtype(name)))))
            if self.engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                _, _, hi = self.engine.get_tensor_profile_shape(name, 0)
                profile_max = hi[0] if profile_max is None else min(profile_max, hi[0])
        return specs, int(profile_max or 0)

    def _run(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        io, stream = self._io, self.stream
        with io:
            for name in INPUT_NAMES:
                src = self._host[name][:n]
                if name in self._staging:
                    np.copyto(self._staging[name][:n], src, casting="same_kind")
                    src = self._staging[name][:n]
                io.upload(self._device[name], src, stream)
                self.context.set_input_shape(name, src.shape)
            if not self.context.execute_async_v3(io.stream_handle(stream)):
                raise RuntimeError(f"{self.path}: TensorRT execution failed")
            outs = {"output_policy": self._host_policy, "output_value": self._host_value}
            for name, host in outs.items():
                dst = self._staging[name][:n] if name in self._staging else host[:n]
                io.download(dst, self._device[name], stream)
            io.sync(stream)
            for name, host in outs.items():
                if name in self._staging:
                    host[:n] = self._staging[name][:n]
        return self._host_policy[:n], self._host_value[:n, 0]

    def close(self) -> None:
        """Drop the context before the engine, as TensorRT requires."""
        with self._io:
            self.context = None
            self.engine = None
            self._device.clear()
