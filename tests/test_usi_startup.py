"""A first start on a new machine: isready says what its one-time work is doing (engine.play.preparing),
and `bin/usi_engine --prepare` does that work ahead, filling the caches a later isready reads."""

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.play import preparing
from engine.play.preparing import ANNOUNCE_S, HEARTBEAT_S, Progress, heartbeat

ENGINE = str(Path(__file__).resolve().parent.parent / "bin" / "usi_engine")
COLD_S = 300  # a first start exports, calibrates and compiles: tens of seconds on a loaded machine


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ----- the rules, on a clock the test moves -----


def test_a_step_is_announced_once_after_announce_s_then_the_heartbeat_follows():
    clock = FakeClock()
    progress = Progress(clock)
    progress.stage("calibrating int8", "one-time, cached in /c")
    clock.now += ANNOUNCE_S - 0.25
    assert progress.due() is None  # a step that ends sooner (a cache hit) says nothing
    clock.now += 0.25
    assert progress.due() == "info string calibrating int8 (one-time, cached in /c)"
    assert progress.due() is None
    clock.now += HEARTBEAT_S
    assert (
        progress.due() == f"info string still preparing: calibrating int8, {ANNOUNCE_S + HEARTBEAT_S:.0f} s"
    )
    clock.now += HEARTBEAT_S - 0.25
    assert progress.due() is None
    clock.now += 0.25
    assert progress.due().startswith("info string still preparing: calibrating int8, ")


def test_steps_too_short_to_announce_still_get_a_line_every_heartbeat_s():
    """Many short steps in a row: the GUI still hears every HEARTBEAT_S, naming the step of the moment,
    which is announced (with its note) rather than heartbeaten when it is new."""
    clock = FakeClock()
    progress = Progress(clock)
    lines: list[tuple[float, str]] = [(clock.now, "isready")]
    tick = 0.25  # the heartbeat thread's look, exact in binary
    for i in range(40):
        progress.stage(f"step {i}", "")
        for _ in range(3):  # 0.75 s each: never ANNOUNCE_S long
            clock.now += tick
            line = progress.due()
            if line is not None:
                lines.append((clock.now, line))
    gaps = [b - a for (a, _), (b, _) in zip(lines, lines[1:], strict=False)]
    assert len(lines) > 5 and max(gaps) <= HEARTBEAT_S + tick
    assert all(re.fullmatch(r"info string step \d+", line) for _, line in lines[1:]), lines


def test_a_repeated_step_is_announced_once_and_its_seconds_add_up():
    clock = FakeClock()
    progress = Progress(clock)
    progress.stage("loading the model", "x")
    clock.now += 2.0
    assert progress.due() == "info string loading the model (x)"
    progress.stage("warming up", "")
    clock.now += 0.5
    progress.stage("loading the model", "x")  # the next UCT thread's copy
    clock.now += 1.5
    assert progress.due() is None  # said already, and the last line is only 2 s old
    progress.finish()
    assert progress.seconds == {"loading the model": 3.5, "warming up": 0.5}
    clock.now += 60
    assert progress.due() is None  # finished: no line is due


def test_heartbeat_thread_sends_whole_lines_and_none_after_the_block(monkeypatch):
    monkeypatch.setattr(preparing, "ANNOUNCE_S", 0.05)
    monkeypatch.setattr(preparing, "HEARTBEAT_S", 0.1)
    monkeypatch.setattr(preparing, "TICK_S", 0.01)
    lines: list[str] = []
    with heartbeat(lines.append) as progress:
        progress.stage("compiling search kernels", "one-time")
        deadline = time.monotonic() + 10
        while not any("still preparing" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.01)
    sent = list(lines)
    time.sleep(0.1)
    assert lines == sent and "heartbeat" not in {t.name for t in threading.enumerate()}  # it ended
    assert lines[0] == "info string compiling search kernels (one-time)"
    assert lines[1].startswith("info string still preparing: compiling search kernels, ")


# ----- the real engine, its caches in empty folders -----


def fresh_caches(root: Path) -> dict[str, str]:
    """The environment of a machine that never ran the engine (its caches in empty folders)."""
    return {
        **os.environ,
        "GUMBEL_SHOGI_CACHE": str(root / "models"),
        "NUMBA_CACHE_DIR": str(root / "kernels"),
    }


def isready(env: dict[str, str], model: Path) -> list[str]:
    """The lines a start answers from usi up to readyok, with the default options but the model."""
    dialogue = f"usi\nsetoption name DNN_Model value {model}\nisready\nquit\n"
    proc = subprocess.run([ENGINE], input=dialogue, env=env, capture_output=True, text=True, timeout=COLD_S)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and "readyok" in lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    return lines[lines.index("usiok") + 1 : lines.index("readyok")]


def prepare(env: dict[str, str], model: Path) -> subprocess.CompletedProcess:
    argv = [ENGINE, "--prepare", "--model", str(model)]
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=COLD_S
    )


def cache_files(env: dict[str, str]) -> dict[Path, int]:
    """Every file of both caches, with its modification time."""
    roots = (Path(env["GUMBEL_SHOGI_CACHE"]), Path(env["NUMBA_CACHE_DIR"]))
    return {p: p.stat().st_mtime_ns for root in roots for p in root.rglob("*") if p.is_file()}


def test_first_isready_says_what_it_prepares_before_readyok(tmp_path, tiny_model):
    env = fresh_caches(tmp_path)
    lines = isready(env, tiny_model)
    kernels = f"info string compiling search kernels (one-time, cached in {env['NUMBA_CACHE_DIR']})"
    assert kernels in lines, lines  # numba's first compile takes seconds on any machine
    assert all(line.startswith("info string ") for line in lines), lines


def test_prepare_fills_the_caches_a_later_isready_reads(tmp_path, tiny_model):
    env = fresh_caches(tmp_path)
    proc = prepare(env, tiny_model)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    out = proc.stdout.splitlines()
    assert f"  models (ONNX, int8, TensorRT) cached in {env['GUMBEL_SHOGI_CACHE']}" in out, out
    assert f"  search kernels cached in {env['NUMBA_CACHE_DIR']}" in out, out
    listed = next(line for line in out if line.startswith("  steps: ")).removeprefix("  steps: ")
    steps = {doing: float(s) for doing, s, _ in (step.rsplit(" ", 2) for step in listed.split(", "))}
    assert "calibrating int8" in steps and "compiling search kernels" in steps, out
    for doing, seconds in steps.items():  # a step long enough for a heartbeat had one
        if seconds > ANNOUNCE_S + HEARTBEAT_S + 1:
            assert any(line.startswith(f"still preparing: {doing}, ") for line in out), (doing, out)

    cached = cache_files(env)
    assert any(p.name.endswith(".onnx") and "-int8-" in p.name for p in cached), cached
    assert any(p.suffix == ".nbi" for p in cached), cached  # numba's index of compiled kernels
    lines = isready(env, tiny_model)
    assert not any(re.match(r"info string (calibrating|compiling|exporting)", line) for line in lines), lines
    assert cache_files(env) == cached  # nothing exported, calibrated or compiled again


@pytest.mark.parametrize("broken", [False, True])
def test_prepare_with_a_bad_model_is_one_error_line(tmp_path, broken):
    model = tmp_path / "model.pt"
    if broken:
        model.write_bytes(b"not a checkpoint")
    proc = prepare(fresh_caches(tmp_path), model)
    assert proc.returncode == 2, proc
    assert proc.stderr.startswith("usi_engine: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert str(model) in proc.stderr and "Traceback" not in proc.stdout


def test_help_imports_no_runtime():
    """--help answers at once: arguments are parsed before the engine's imports (Python's import log)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", ENGINE, "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "--prepare" in proc.stdout
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line
    }
    assert not imported & {"torch", "onnxruntime", "numba", "cshogi", "numpy"}, imported
