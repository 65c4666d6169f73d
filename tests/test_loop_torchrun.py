"""The loop's training step under torchrun (--train-processes): two gloo processes on this CPU stand in
for the GPUs of one host; a SIGTERM reaches them through the loop and a rerun resumes the training."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from train.trainer.config import TrainConfig, train_argv

REPO = Path(__file__).resolve().parent.parent
LOOP = [sys.executable, str(REPO / "bin" / "loop")]
TIMEOUT = 300


def bin_train_parser():
    loader = importlib.machinery.SourceFileLoader("bin_train", str(REPO / "bin" / "train"))
    spec = importlib.util.spec_from_loader("bin_train", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module.parser()


def test_train_argv_gives_back_the_config():
    cfg = TrainConfig(
        data=["a.hcpe3", "b/"],
        out="run",
        init="gen0/model.pt",
        resume=True,
        epochs=3,
        batch_size=64,
        lr=0.02,
        optimizer="adamw",
        val_lambda=0.5,
        seed=7,
        device="cpu",
        workers=0,
        log_interval=10,
        progress=False,
        hcpe3_average=True,
    )
    args = vars(bin_train_parser().parse_args(train_argv(cfg)))
    for name in ("evaluate", "save_dlshogi", "dlshogi_resnet10_swish"):
        args.pop(name)
    if args["network"] is None:
        del args["network"]
    assert TrainConfig(**args) == cfg
    assert train_argv(TrainConfig()) == ["--out", "run"]


def loop_args(run: Path, *extra: str) -> list[str]:
    settings = dict(
        dir=run, generations=1, network="tiny", games=3, sims=4, parallel=3, max_moves=24,
        batch_size=32, lr=0.01, epochs=400, eval_games=0, train_processes=2, workers=0, device="cpu",
    )  # fmt: skip
    return [*LOOP, *(a for k, v in settings.items() for a in (f"--{k.replace('_', '-')}", str(v)))]


def test_loop_trains_in_two_processes_and_resumes_after_sigterm(tmp_path):
    run = tmp_path / "run"
    args = [*loop_args(run), "--no-greedy", "--no-progress"]
    metrics = run / "gen0001" / "train" / "metrics.jsonl"
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (metrics.is_file() and metrics.read_text().strip()) and proc.poll() is None:
            assert time.monotonic() < deadline, "training never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "rerun the same command" in err and "Traceback" not in err
    assert (run / "gen0001" / "train" / "checkpoint.pt").is_file()
    assert not (run / "gen0001" / "train" / "model.pt").exists()
    state = json.loads((run / "state.json").read_text())["generations"]
    assert "train" not in state["1"]
    stopped_at = json.loads(metrics.read_text().splitlines()[-1])["step"]

    done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "(resuming)" in done.stdout + done.stderr
    trained = json.loads((run / "state.json").read_text())["generations"]["1"]["train"]
    assert trained["processes"] == 2
    assert trained["steps"] > stopped_at > 0
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines() if '"step"' in line]
    assert steps == sorted(set(steps))  # one row per logged step: the resumed run went on, not over


def test_train_processes_refuses_a_device_index(tmp_path):
    out = subprocess.run(
        [*LOOP, "--dir", str(tmp_path / "r"), "--train-processes", "2", "--device", "cuda:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "--device cuda, not cuda:1" in out.stderr and "Traceback" not in out.stderr
