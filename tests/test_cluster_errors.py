"""One-line errors of the cluster commands that need no running cluster: `--ray auto` with none to
join, a Ray version mismatch (Ray's own message, mapped), and build_engine's --device."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import UserError
from export.build_engine import main as build_engine
from export.build_engine import visible_devices

REPO = Path(__file__).resolve().parent.parent


def test_ray_auto_without_a_cluster_is_one_line_and_leaves_nothing(tmp_path):
    pytest.importorskip("ray")
    from ray._private.services import find_gcs_addresses

    if find_gcs_addresses():
        pytest.skip("a Ray cluster runs on this host: --ray auto would join it")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(tmp_path / "ray-tmp")  # no address file of an earlier cluster is found
    out = tmp_path / "out"
    cmd = [sys.executable, str(REPO / "bin" / "selfplay"), "--ray", "auto", "--out", str(out), "--games", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("selfplay: error: --ray auto: no Ray cluster"), proc.stderr
    assert "Traceback" not in proc.stderr and not proc.stdout
    assert not out.exists()
    assert not find_gcs_addresses()  # it started no cluster of its own


def test_a_ray_version_mismatch_names_both_versions_in_one_line():
    pytest.importorskip("ray")
    from ray._private.utils import check_version_info

    from engine.selfplay.ray_connect import version_mismatch

    with pytest.raises(RuntimeError) as raised:  # Ray's own check, as ray.init runs it on joining
        check_version_info({"ray_version": "2.9.3", "python_version": "3.10.12"}, "10.0.0.2")
    error = version_mismatch("10.0.0.1:6379", str(raised.value))
    assert isinstance(error, UserError)
    import ray

    here = f"this host Ray {ray.__version__} on Python {'.'.join(map(str, sys.version_info[:3]))}"
    assert str(error) == (
        f"--ray 10.0.0.1:6379: the cluster runs Ray 2.9.3 on Python 3.10.12, {here}: "
        "install the same Ray and Python on every host"
    )
    assert version_mismatch("auto", "some other runtime error") is None


def test_build_engine_device_picks_the_gpu_or_says_why_not(tmp_path, capsys):
    assert visible_devices("cuda", None) == "0"
    assert visible_devices("cuda:1", None) == "1"
    assert visible_devices("cuda:1", "4,6") == "6"  # counted among the GPUs already visible
    with pytest.raises(UserError, match="leaves 2 GPU"):
        visible_devices("cuda:2", "4,6")
    for bad in ("cpu", "cuda:x", "gpu1"):
        with pytest.raises(UserError, match="TensorRT builds on a GPU"):
            visible_devices(bad, None)
    assert build_engine([str(tmp_path / "missing.onnx"), "--device", "cpu"]) == 2
    assert capsys.readouterr().err.strip() == (
        "build_engine: error: --device cpu: TensorRT builds on a GPU: cuda or cuda:N"
    )
    onnx = tmp_path / "m.onnx"
    cmd = [sys.executable, str(REPO / "export" / "build_engine.py"), str(onnx), "--device", "cuda:1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2  # --device parsed; the missing model is the one line
    assert proc.stderr.strip() == f"build_engine: error: {onnx}: ONNX model not found"
