"""The TensorRT contract, against NVIDIA's real Python bindings of one 10.x and one 11.x release.

The bindings wheels (`tensorrt-cu12-bindings`, about 1.3 MB each) are fetched once from PyPI into the
cache; the libraries they load (`-libs` wheels, GBs, not fetchable here) are replaced by stand-ins built
with the system C compiler that export the few C symbols the module imports and create nothing. Each
release runs tests/trt_contract_cases.py in a process of its own (two releases cannot share one
process). In CI a wheel that cannot be fetched or a missing compiler fails the test; elsewhere it skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RELEASES = {"10.16.1.11": 10, "11.4.0.106": 11}
SYMBOLS = """
void *createInferBuilder_INTERNAL(void *logger, int version) { return 0; }
void *createInferRefitter_INTERNAL(void *engine, void *logger, int version) { return 0; }
void *createInferRuntime_INTERNAL(void *logger, int version) { return 0; }
void *createNvOnnxParserRefitter_INTERNAL(void *refitter, void *logger, int version) { return 0; }
void *createNvOnnxParser_INTERNAL(void *network, void *logger, int version) { return 0; }
void *getBuilderPluginRegistry(int capability) { return 0; }
int getNvOnnxParserVersion(void) { return 0; }
void *getPluginRegistry(void) { return 0; }
int initLibNvInferPlugins(void *logger, const char *name_space) { return 0; }
"""


def unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"TensorRT contract: {why}")
    pytest.skip(why)


def cache_dir() -> Path:
    root = os.environ.get("GUMBEL_SHOGI_CACHE") or os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / ("" if os.environ.get("GUMBEL_SHOGI_CACHE") else "gumbel-shogi") / "trt-contract"


def bindings(version: str) -> Path:
    """The release's bindings wheel unpacked (its module and dist-info), fetched on first use."""
    folder = cache_dir() / f"tensorrt_cu12_bindings-{version}"
    if (folder / "tensorrt_bindings" / "__init__.py").is_file():
        return folder
    download = folder.with_name(folder.name + ".download")
    shutil.rmtree(download, ignore_errors=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               f"tensorrt-cu12-bindings=={version}", "-d", str(download)]  # fmt: skip
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        unavailable(f"fetching tensorrt-cu12-bindings=={version} took over 300 s")
    wheels = sorted(download.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        unavailable(f"cannot fetch tensorrt-cu12-bindings=={version}: {result.stderr.strip()[-300:]}")
    unpacked = folder.with_name(folder.name + ".unpack")
    shutil.rmtree(unpacked, ignore_errors=True)
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(unpacked)
    shutil.rmtree(folder, ignore_errors=True)
    unpacked.rename(folder)
    shutil.rmtree(download, ignore_errors=True)
    return folder


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> Path:
    """libnvinfer, libnvinfer_plugin and libnvonnxparser stand-ins, sonames .so.10 and .so.11."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        unavailable("no C compiler for the stand-in TensorRT libraries")
    folder = tmp_path_factory.mktemp("trt-stubs")
    source = folder / "nvinfer_stub.c"
    source.write_text(SYMBOLS)
    for major in sorted(set(RELEASES.values())):
        for lib in ("libnvinfer", "libnvinfer_plugin", "libnvonnxparser"):
            name = f"{lib}.so.{major}"
            subprocess.run([compiler, "-shared", "-fPIC", f"-Wl,-soname,{name}", "-o", str(folder / name),
                            str(source)], check=True, timeout=120)  # fmt: skip
    return folder


def run_contract(version: str, stubs: Path, source_tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRT_CONTRACT_BINDINGS": str(bindings(version)), "TRT_CONTRACT_STUBS": str(stubs),
           "TRT_CONTRACT_MAJOR": str(RELEASES[version]), "PYTHONPATH": str(source_tree),
           "GUMBEL_SHOGI_CACHE": str(stubs / "cache" / version)}  # fmt: skip
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
               str(source_tree / "tests" / "trt_contract_cases.py")]  # fmt: skip
    return subprocess.run(command, cwd=source_tree, env=env, capture_output=True, text=True, timeout=540)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("version", list(RELEASES))
def test_tensorrt_contract(version, stubs):
    result = run_contract(version, stubs, REPO)
    assert result.returncode == 0, (
        f"TensorRT {version} contract:\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}"
    )
    assert " passed" in result.stdout and " failed" not in result.stdout


@pytest.mark.timeout(600)
def test_a_misspelled_tensorrt_name_fails_the_contract(stubs, tmp_path):
    """The contract is not vacuous: the project with one TensorRT method name misspelled fails it."""
    tree = tmp_path / "tree"
    for folder in ("engine", "export", "train", "tests", "models", "bench"):
        shutil.copytree(REPO / folder, tree / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shared = REPO.parent / "shared"
    if shared.is_dir():
        (tmp_path / "shared").symlink_to(shared)
    build = tree / "engine" / "backends" / "trt_build.py"
    text = build.read_text()
    assert "config.set_memory_pool_limit(" in text
    build.write_text(text.replace("config.set_memory_pool_limit(", "config.set_memory_pool_limits("))
    result = run_contract("11.4.0.106", stubs, tree)
    assert result.returncode != 0
    assert "IBuilderConfig has no attribute 'set_memory_pool_limits'" in result.stdout
