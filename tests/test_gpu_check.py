"""bench/gpu_check.sh and bench/gpu_check.py where there is no GPU: one line and exit 0 from the script, every
section's code path on the CPU (--cpu-smoke), a section over its limit recorded while the others run, the
budget, and bad flags as one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHECK = REPO / "bench" / "gpu_check.py"
REQUIRED = ("environment", "agreement", "speed", "training", "selfplay", "usi")


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(CHECK), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_the_script_says_in_one_line_that_there_is_no_gpu():
    proc = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_check.sh")], cwd="/", capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "gpu_check: no GPU on this machine (nvidia-smi finds none): nothing to measure"
    ]
    assert proc.stderr == ""


@pytest.mark.timeout(400)
def test_cpu_smoke_runs_every_section(tmp_path):
    out = tmp_path / "check.json"
    proc = run("--cpu-smoke", "--out", str(out), timeout=360)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[-2] == f"gpu_check: results in {out}"
    assert lines[-1].startswith("gpu_check --cpu-smoke: CPU, tiny fp16 b16 ")
    assert lines[-1].endswith(f"agreement ok, all sections ok -> {out}")
    results = json.loads(out.read_text())
    assert results["summary"] == lines[-1] and results["mode"] == "cpu-smoke"
    sections = results["sections"]
    assert [n for n in REQUIRED if "error" in sections[n]] == []
    assert sections["environment"]["cshogi"] and sections["environment"]["gpu"] is None
    for net in ("tiny", "small"):
        assert sections["agreement"]["nets"][net]["fp16"]["argmax_agreement"] >= 0.98
        rows = sections["speed"]["nets"][net]["b16"]
        assert min(rows["fp32_rows_per_s"], rows["fp16_rows_per_s"], rows["fp16_cuda_graphs_rows_per_s"]) > 0
    assert sections["agreement"]["nets"]["small"]["weights"] == "models/default.pt"
    training = sections["training"]
    assert training["finite"] and training["steps_per_s"] > 0 and training["batch_size"] == 64
    assert training["last_loss"] < training["first_loss"]  # a few steps on the same batches learn them
    assert sections["selfplay"]["positions"] > 0 and sections["selfplay"]["positions_per_s"] > 0
    moves = sections["usi"]["runs"][0]["moves"]
    assert len(moves) == 2 and all(m["nodes"] > 0 and m["bestmove"] != "resign" for m in moves)
    assert sections["inference"]["skipped"] == "not run with --cpu-smoke"


@pytest.mark.timeout(200)
def test_a_section_over_its_limit_is_recorded_and_the_next_still_runs(tmp_path):
    out = tmp_path / "check.json"
    proc = run("--cpu-smoke", "--sections", "usi,tensorrt", "--timeout", "usi=1", "--out", str(out))
    assert proc.returncode == 1
    sections = json.loads(out.read_text())["sections"]
    assert sections["usi"]["error"] == "timed out after 1 s" and sections["usi"]["seconds"] < 30
    assert "error" not in sections["tensorrt"]
    assert proc.stdout.splitlines()[-1].endswith(f"failed: usi (timed out after 1 s) -> {out}")


def test_the_budget_bounds_the_run(tmp_path):
    out = tmp_path / "check.json"
    proc = run("--cpu-smoke", "--budget", "5", "--out", str(out))
    assert proc.returncode == 1
    sections = json.loads(out.read_text())["sections"]
    assert len(sections) == 9
    assert all(
        r["error"].startswith("skipped: ") and r["error"].endswith(" of the 5 s budget left")
        for r in sections.values()
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sections", "agreement,nope"], "gpu_check: error: --sections: no section 'nope'"),
        (["--budget", "0"], "gpu_check: error: --budget must be positive, got 0"),
        (["--timeout", "usi=soon"], "gpu_check: error: argument --timeout: 'usi=soon': needs NAME=SECONDS"),
    ],
)
def test_a_bad_flag_is_one_line(args, message, tmp_path):
    proc = run(*args, "--out", str(tmp_path / "x.json"))
    assert proc.returncode == 2 and not (tmp_path / "x.json").exists()
    assert proc.stderr.splitlines()[-1].startswith(message)
