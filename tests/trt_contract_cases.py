"""The TensorRT contract, run by tests/test_trt_contract.py in a process of its own for one release.

`import tensorrt` here is NVIDIA's real Python module (the release's bindings wheel), loaded over small
stand-in libnvinfer/libnvonnxparser libraries that export the few C symbols it needs and create
nothing (as a library without a working driver does). With it: every TensorRT name the project uses
exists in the release; the build and the evaluator, driven against recording objects that refuse any
name the real classes lack and carry the real enums, take the release's FP16 route from every entry
point; and the library's nullptr becomes the project's one line. Not collected by the suite itself
(the file name has no test_ prefix): it needs the environment the outer test makes.
"""

from __future__ import annotations

import ast
import ctypes
import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

for _lib in ("libnvinfer", "libnvinfer_plugin", "libnvonnxparser"):
    ctypes.CDLL(str(Path(os.environ["TRT_CONTRACT_STUBS"]) / f"{_lib}.so.{os.environ['TRT_CONTRACT_MAJOR']}"),
                mode=ctypes.RTLD_GLOBAL)  # fmt: skip
sys.path.insert(0, os.environ["TRT_CONTRACT_BINDINGS"])
import tensorrt_bindings as trt  # noqa: E402

sys.modules["tensorrt"] = trt

from engine.backends import choose, trt_build, trt_evaluator  # noqa: E402
from engine.backends.choose import Platform, create_evaluator  # noqa: E402
from engine.backends.fp16_onnx import fp16_typed  # noqa: E402
from engine.errors import UserError  # noqa: E402

MAJOR = int(os.environ["TRT_CONTRACT_MAJOR"])
REPO = Path(__file__).resolve().parent.parent
DLSHOGI = REPO.parent / "shared" / "interop" / "dlshogi"
GPU = "Contract GPU sm90"
GPU_PLATFORM = Platform(cuda=True, tensorrt=True, ort_providers=("CPUExecutionProvider",), gpus=1)


class Recorder:
    """Stands for an instance of real TensorRT class `cls`: any attribute the class lacks is an
    AttributeError naming it; methods are recorded in `calls` and answered from `answers`."""

    def __init__(self, cls: type, calls: list, answers: dict | None = None, **values) -> None:
        self._cls, self._calls, self._answers, self._values = cls, calls, answers or {}, values

    def __getattr__(self, name: str):
        if not hasattr(self._cls, name):
            raise AttributeError(
                f"TensorRT {trt.__version__}: {self._cls.__name__} has no attribute {name!r}"
            )
        if name in self._values:
            return self._values[name]

        def method(*args):
            self._calls.append((self._cls.__name__, name, args))
            answer = self._answers.get(name)
            return answer(*args) if callable(answer) else answer

        return method

    def __setattr__(self, name: str, value) -> None:
        if name.startswith("_"):
            return super().__setattr__(name, value)
        self.__getattr__(name)  # checks the name
        self._values[name] = value


def elem_dtype(elem_type: int):
    return trt.DataType.HALF if elem_type == onnx.TensorProto.FLOAT16 else trt.DataType.FLOAT


class RecordingTensorRT:
    """The real module, except that Builder, OnnxParser and Runtime make Recorders: the 'engine' a build
    serializes is a JSON note of what was asked, and the runtime turns it into an engine whose context
    runs the parsed ONNX on onnxruntime (the CPU), reading and writing the buffers set by address."""

    def __init__(self) -> None:
        self.calls: list = []

    def __getattr__(self, name: str):
        return getattr(trt, name)

    def Builder(self, logger):  # noqa: N802 - TensorRT's name
        assert isinstance(logger, trt.ILogger)
        calls = self.calls
        network = Recorder(trt.INetworkDefinition, calls)
        profile = Recorder(trt.IOptimizationProfile, calls)
        cache = Recorder(trt.ITimingCache, calls, {"serialize": lambda: b"timing"})
        config = Recorder(
            trt.IBuilderConfig, calls, {"create_timing_cache": lambda data: cache, "get_timing_cache": cache}
        )

        def build(net, cfg):
            flags = next(args[0] for _, name, args in calls if name == "create_network")
            shapes = {a[0]: [list(s) for s in a[1:]] for _, name, a in calls if name == "set_shape"}
            fp16_flag = any(name == "set_flag" and args[0] == trt.BuilderFlag.FP16 for _, name, args in calls)
            note = {"onnx": net._values["parsed"], "flags": flags, "fp16_flag": fp16_flag, "profile": shapes}
            return json.dumps(note).encode()

        return Recorder(
            trt.Builder,
            calls,
            {
                "create_network": lambda flags: network,
                "create_builder_config": config,
                "create_optimization_profile": profile,
                "build_serialized_network": build,
            },
        )

    def OnnxParser(self, network, logger):  # noqa: N802
        def parse(path):
            graph = onnx.load(path, load_external_data=False).graph
            inputs = [
                Recorder(trt.ITensor, self.calls, name=i.name,
                         shape=tuple(d.dim_value or -1 for d in i.type.tensor_type.shape.dim))
                for i in graph.input
            ]  # fmt: skip
            network._values.update(parsed=path, num_inputs=len(inputs), inputs=inputs)
            network._answers["get_input"] = lambda i: inputs[i]
            return True

        return Recorder(trt.OnnxParser, self.calls, {"parse_from_file": parse}, num_errors=0)

    def Runtime(self, logger):  # noqa: N802
        return Recorder(trt.Runtime, self.calls, {"deserialize_cuda_engine": self._engine})

    def _engine(self, data: bytes):
        note = json.loads(bytes(data))
        model = onnx.load(note["onnx"], load_external_data=False)
        io = [(v.name, elem_dtype(v.type.tensor_type.elem_type), mode)
              for vs, mode in ((model.graph.input, trt.TensorIOMode.INPUT),
                               (model.graph.output, trt.TensorIOMode.OUTPUT)) for v in vs]  # fmt: skip
        shapes = {v.name: tuple(d.dim_value or -1 for d in v.type.tensor_type.shape.dim)
                  for v in [*model.graph.input, *model.graph.output]}  # fmt: skip
        addresses: dict[str, int] = {}
        given: dict[str, tuple] = {}

        def execute(stream_handle):
            import onnxruntime as ort

            session = ort.InferenceSession(note["onnx"], providers=["CPUExecutionProvider"])
            feeds = {n: CpuIO.at(addresses[n], given[n], trt.nptype(dtype)) for n, dtype, mode in io
                     if mode == trt.TensorIOMode.INPUT}  # fmt: skip
            for (n, _, mode), out in zip(io[2:], session.run([n for n, _, _ in io[2:]], feeds), strict=True):
                assert mode == trt.TensorIOMode.OUTPUT
                CpuIO.at(addresses[n], out.shape, out.dtype)[...] = out
            return True

        context = Recorder(
            trt.IExecutionContext,
            self.calls,
            {
                "set_tensor_address": lambda name, address: addresses.__setitem__(name, address),
                "set_input_shape": lambda name, shape: given.__setitem__(name, tuple(shape)),
                "execute_async_v3": execute,
            },
        )
        return Recorder(
            trt.ICudaEngine,
            self.calls,
            {
                "get_tensor_name": lambda i: io[i][0],
                "get_tensor_shape": lambda name: shapes[name],
                "get_tensor_dtype": lambda name: next(d for n, d, _ in io if n == name),
                "get_tensor_mode": lambda name: next(m for n, _, m in io if n == name),
                "get_tensor_profile_shape": lambda name, i: note["profile"][name],
                "create_execution_context": context,
            },
            num_io_tensors=len(io),
        )


class CpuIO:
    """TrtEvaluator's device memory in host arrays, found again by address (as TensorRT would)."""

    arrays: dict[int, np.ndarray] = {}

    def __init__(self, device: int) -> None:
        self.device_index = device

    def __enter__(self) -> CpuIO:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def stream(self) -> object:
        return object()

    def stream_handle(self, stream: object) -> int:
        return 0

    def host(self, shape, dtype) -> np.ndarray:
        return np.zeros(shape, dtype)

    def device(self, shape, dtype) -> np.ndarray:
        buf = np.zeros(shape, dtype)
        CpuIO.arrays[buf.ctypes.data] = buf
        return buf

    def address(self, buf: np.ndarray) -> int:
        return buf.ctypes.data

    def upload(self, dst: np.ndarray, src: np.ndarray, stream: object) -> None:
        dst.reshape(-1)[: src.size] = src.reshape(-1)

    def download(self, dst: np.ndarray, src: np.ndarray, stream: object) -> None:
        dst.reshape(-1)[:] = src.reshape(-1)[: dst.size]

    def sync(self, stream: object) -> None:
        pass

    @classmethod
    def at(cls, address: int, shape: tuple, dtype) -> np.ndarray:
        buf = cls.arrays[address]
        return buf.reshape(-1)[: int(np.prod(shape))].reshape(shape).view(np.dtype(dtype))


@pytest.fixture
def recording(monkeypatch) -> RecordingTensorRT:
    fake = RecordingTensorRT()
    monkeypatch.setattr(trt_build, "import_tensorrt", lambda: fake)
    monkeypatch.setattr(trt_evaluator, "import_tensorrt", lambda: fake)
    return fake


@pytest.fixture(autouse=True)
def machine(monkeypatch) -> None:
    """A GPU's name and host-memory buffers: what the contract needs of a machine without one."""
    monkeypatch.setattr(trt_build, "gpu_identity", lambda device=0: GPU)
    monkeypatch.setattr(trt_evaluator, "gpu_identity", lambda device=0: GPU)
    monkeypatch.setattr(trt_evaluator, "cuda_io", CpuIO)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    from engine.core.network import build, preset, save_checkpoint

    path = tmp_path_factory.mktemp("ckpt") / "tiny.pt"
    save_checkpoint(path, build(preset("tiny"), seed=1))
    return path


@pytest.fixture(scope="module")
def fp32_onnx(checkpoint, tmp_path_factory) -> Path:
    from engine.backends.onnx_model import write_onnx
    from engine.core.network import load_model

    return write_onnx(load_model(checkpoint), tmp_path_factory.mktemp("onnx") / "tiny.onnx")


def built(fake: RecordingTensorRT) -> dict:
    """What the (one) build asked for."""
    names = [(cls, name) for cls, name, _ in fake.calls]
    assert ("Builder", "build_serialized_network") in names, names
    flags = next(args[0] for _, name, args in fake.calls if name == "create_network")
    parsed = next(args[0] for _, name, args in fake.calls if name == "parse_from_file")
    set_flags = [args[0] for _, name, args in fake.calls if name == "set_flag"]
    shapes = {args[0]: args[1:] for _, name, args in fake.calls if name == "set_shape"}
    return {"flags": flags, "parsed": Path(parsed), "set_flags": set_flags, "shapes": shapes}


def assert_fp16_route(b: dict) -> None:
    """TensorRT 10: BuilderFlag.FP16 over a weakly typed network; 11: strongly typed, FP16-typed ONNX."""
    strongly = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    if MAJOR == 10:
        assert b["flags"] == 0 and b["set_flags"] == [trt.BuilderFlag.FP16]
    else:
        assert b["flags"] == strongly and b["set_flags"] == []
        assert fp16_typed(b["parsed"])


def test_the_release_is_the_one_asked_for():
    assert trt.__version__.split(".")[0] == str(MAJOR)
    assert trt_build.has_fp16_flag(trt) == (MAJOR == 10)
    assert trt_build.tensorrt_cuda_major() == 12  # the cu12 bindings' distribution is on the path


def test_every_tensorrt_name_in_the_source_exists():
    """`trt.A.B` chains anywhere in the project resolve on the real module; BuilderFlag.FP16 alone may be
    missing, and only where the code asks has_fp16_flag first."""
    missing = []
    for folder in ("engine", "export", "train", "bench"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Attribute) or isinstance(getattr(node, "ctx", None), ast.Store):
                    continue
                chain, inner = [], node
                while isinstance(inner, ast.Attribute):
                    chain.insert(0, inner.attr)
                    inner = inner.value
                if not (isinstance(inner, ast.Name) and inner.id == "trt"):
                    continue
                obj = trt
                for name in chain:
                    if not hasattr(obj, name):
                        if ".".join(chain) != "BuilderFlag.FP16" or MAJOR == 10:
                            missing.append(f"{path.relative_to(REPO)}:{node.lineno}: trt.{'.'.join(chain)}")
                        break
                    obj = getattr(obj, name)
    assert not missing, f"TensorRT {trt.__version__} lacks: {missing}"


@pytest.mark.parametrize("source", ["ours", "dlshogi-external-data", "dlshogi-legacy"])
def test_build_engine_cli_takes_the_fp16_route(recording, fp32_onnx, tmp_path, source):
    from export.build_engine import main

    onnx_path = {"ours": fp32_onnx, "dlshogi-external-data": DLSHOGI / "train-r5x64s.onnx",
                 "dlshogi-legacy": DLSHOGI / "train-r5x64s-legacy.onnx"}[source]  # fmt: skip
    if not onnx_path.is_file():
        pytest.skip(f"{onnx_path} missing: the dlshogi fixtures live in ../shared")
    assert main([str(onnx_path), "--out-dir", str(tmp_path), "--max-batch", "64", "--opt-batch", "16"]) == 0
    b = built(recording)
    assert_fp16_route(b)
    planes = {"input1": (62, 9, 9), "input2": (57, 9, 9)}
    assert b["shapes"] == {n: ((1, *p), (16, *p), (64, *p)) for n, p in planes.items()}
    sidecar = json.loads(next(tmp_path.glob("*.engine.json")).read_text())
    assert sidecar["build"] == ("fp16-flag" if MAJOR == 10 else "fp16-typed") and sidecar["gpu"] == GPU
    assert sidecar["tensorrt"] == trt.__version__ and sidecar["precision"] == "fp16"
    pools = [args for _, name, args in recording.calls if name == "set_memory_pool_limit"]
    assert pools == [(trt.MemoryPoolType.WORKSPACE, 4 << 30)]


def test_fp32_stays_possible(recording, fp32_onnx, tmp_path):
    trt_build.build_cached_engine(fp32_onnx, tmp_path, max_batch=8, precision="fp32", log=lambda m: None)
    b = built(recording)
    assert b["set_flags"] == [] and b["parsed"] == fp32_onnx and not fp16_typed(b["parsed"])
    assert b["flags"] == (0 if MAJOR == 10 else 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))


@pytest.mark.parametrize("model", ["checkpoint", "onnx", "dlshogi"])
def test_the_engines_backend_builds_and_serves(recording, checkpoint, fp32_onnx, tmp_path, model):
    """bin/selfplay --trt and the USI engine open models through create_evaluator: a checkpoint, our FP32
    ONNX and dlshogi's reach the release's FP16 build, and the evaluator serves the built model's answers."""
    from engine.backends.onnx_evaluator import OnnxEvaluator

    path = {"checkpoint": checkpoint, "onnx": fp32_onnx, "dlshogi": DLSHOGI / "train-r5x64s.onnx"}[model]
    if not path.is_file():
        pytest.skip(f"{path} missing: the dlshogi fixtures live in ../shared")
    lines: list[str] = []
    ev = create_evaluator(path, "trt", 16, engine_dir=tmp_path, log=lines.append, platform=GPU_PLATFORM)
    assert_fp16_route(built(recording))
    want_build = "fp16-flag" if MAJOR == 10 else "fp16-typed"
    assert ev.name.startswith(f"tensorrt-{want_build}") and f"backend {ev.name}: requested" in lines[-1]
    reference = fp32_onnx if model == "checkpoint" else path
    with OnnxEvaluator(reference, 16) as ref:
        import cshogi

        boards = [cshogi.Board()]
        for move in list(boards[0].legal_moves)[:5]:
            board = cshogi.Board()
            board.push(move)
            boards.append(board)
        want_p, want_v = ref.evaluate_boards(boards)
    got_p, got_v = ev.evaluate_boards(boards)
    ev.close()
    assert np.abs(got_v - want_v).max() < 0.01 and np.abs(got_p - want_p).max() < 0.05
    called = {(cls, name) for cls, name, _ in recording.calls}
    assert {("IExecutionContext", "set_input_shape"), ("IExecutionContext", "execute_async_v3")} <= called


def test_the_loop_exports_through_the_same_build(recording, checkpoint, tmp_path, monkeypatch):
    from train.loop import steps

    monkeypatch.setattr(steps, "tensorrt_available", lambda: True)
    record = steps.export_model(checkpoint, tmp_path / "model.onnx", 32, log=lambda m: None)
    assert_fp16_route(built(recording))
    assert Path(record["engine"]).is_file()


def test_a_builder_the_library_cannot_create_is_one_line(fp32_onnx, tmp_path):
    """The stand-in libnvinfer creates nothing, as a library without a usable driver: pybind's TypeError
    ('factory function returned nullptr') becomes the project's line."""
    with pytest.raises(UserError) as e:
        trt_build.build_cached_engine(fp32_onnx, tmp_path, max_batch=8, log=lambda m: None)
    line = str(e.value)
    assert "\n" not in line and f"TensorRT {trt.__version__} (CUDA 12) could not create its Builder" in line
    assert "driver r535 or newer" in line


def test_a_runtime_the_library_cannot_create_is_one_line(tmp_path):
    engine = tmp_path / "given.engine"
    engine.write_bytes(b"plan")
    with pytest.raises(
        UserError, match=rf"^TensorRT {trt.__version__} \(CUDA 12\) could not create its Runtime"
    ):
        trt_evaluator.TrtEvaluator(engine, 8)


def test_auto_falls_back_with_its_reason(checkpoint, tmp_path, monkeypatch):
    """Backend auto with TensorRT installed but unable to start: torch on CUDA next (it fails too on a
    machine without a GPU), then the CPU, and the one backend line says why."""
    monkeypatch.setattr(choose, "default_cache_dir", lambda: tmp_path)
    lines: list[str] = []
    ev = create_evaluator(checkpoint, "auto", 8, log=lines.append, platform=GPU_PLATFORM, engine_dir=tmp_path)
    ev.close()
    backend = [line for line in lines if line.startswith("info string backend")]
    assert len(backend) == 1 and backend[0].startswith("info string backend onnx-cpu")
    assert (
        f"after TensorRT failed (TensorRT {trt.__version__} (CUDA 12) could not create its Builder"
        in backend[0]
    )
