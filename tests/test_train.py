import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from engine.core.network import load_model, read_checkpoint
from engine.errors import UserError
from train.data import synthetic
from train.trainer.config import TrainConfig, auto_batch_size, lr_factor
from train.trainer.evaluation import evaluate_checkpoint
from train.trainer.plot import read_jsonl
from train.trainer.run import train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(REPO, "bin", "train")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("traindata")
    synthetic.write_hcpe(d / "train.hcpe", 3000, seed=0)
    synthetic.write_hcpe(d / "test.hcpe", 400, seed=99)
    synthetic.write_data(d / "small.data", 400, seed=1)
    synthetic.write_hcpe3(d / "games.hcpe3", 8, seed=2)
    return d


def quick(out, data_paths, **kw) -> TrainConfig:
    base = dict(
        data=[str(p) for p in data_paths],
        out=str(out),
        network="tiny",
        batch_size=64,
        lr=0.05,
        workers=0,
        log_interval=5,
        progress=False,
    )
    return TrainConfig(**{**base, **kw})


def test_learns_a_learnable_task(data, tmp_path):
    out = tmp_path / "run"
    summary = train(quick(out, [data / "train.hcpe"], epochs=2, test=[str(data / "test.hcpe")]))
    rows = read_jsonl(out / "metrics.jsonl")
    train_rows = [r for r in rows if "policy_loss" in r]
    test_rows = [r for r in rows if "test_policy_acc" in r]
    assert len(test_rows) == 2 and summary["finished"]
    assert train_rows[-1]["loss"] < 0.7 * train_rows[0]["loss"]
    assert test_rows[-1]["test_policy_acc"] > 0.15  # chance is ~1/80 legal moves
    assert test_rows[-1]["test_value_acc"] > 0.8
    assert test_rows[-1]["test_policy_loss"] < test_rows[0]["test_policy_loss"] + 0.5
    assert all(r["samples_per_s"] > 0 for r in train_rows)
    assert train_rows[0]["lr"] > train_rows[-1]["lr"] >= 0  # cosine decay to 0
    assert (out / "metrics.png").stat().st_size > 1000
    net = load_model(out / "model.pt")
    assert net.config.channels == 32
    ckpt = read_checkpoint(out / "checkpoint.pt")  # weights_only=True
    assert ckpt["step"] == summary["steps"] == 2 * (3000 // 64)
    # the saved model, measured again from its file, scores what training reported for it
    test_set = [str(data / "test.hcpe")]
    again = evaluate_checkpoint(out / "model.pt", test_set, tmp_path / "cache", batch_size=64)
    for key in (
        "test_policy_acc",
        "test_value_acc",
        "test_policy_loss",
        "test_value_loss",
        "test_policy_entropy",
    ):
        assert again[key] == pytest.approx(test_rows[-1][key], rel=1e-4, abs=1e-5)
    assert again["test_positions"] == 400
    # the policy's entropy: a trained net is far from uniform over the 2187 labels, and not one-hot
    assert 0.05 < again["test_policy_entropy"] < 0.9 * math.log(2187)
    r = run_cli("--evaluate", out / "model.pt", "--test", *test_set, "--cache-dir", tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)
    assert printed["model"] == str(out / "model.pt")
    assert printed["test_policy_acc"] == pytest.approx(again["test_policy_acc"])


def resume_config(out, data, **kw) -> TrainConfig:
    return quick(
        out,
        [data / "small.data", data / "games.hcpe3"],
        epochs=2,
        batch_size=50,
        mirror=0.5,
        ema=0.9,
        val_lambda=0.3,
        warmup_steps=3,
        clip_grad=5.0,
        deterministic=True,
        **kw,
    )


def test_resume_is_exact(data, tmp_path):
    full = train(resume_config(tmp_path / "full", data))
    part = train(resume_config(tmp_path / "part", data, stop_after_steps=7))
    assert part["stopped_by"] == "--stop-after-steps" and part["steps"] == 7 and not part["finished"]
    assert not (tmp_path / "part" / "model.pt").exists()
    rest = train(TrainConfig(out=str(tmp_path / "part"), resume=True, workers=0, progress=False))
    assert rest["finished"] and rest["steps"] == full["steps"]
    a = read_checkpoint(tmp_path / "full" / "checkpoint.pt")
    b = read_checkpoint(tmp_path / "part" / "checkpoint.pt")
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    for k, v in a["ema"].items():
        assert torch.equal(v, b["ema"][k]), k
    ma, mb = load_model(tmp_path / "full" / "model.pt"), load_model(tmp_path / "part" / "model.pt")
    for (k, v), w in zip(ma.state_dict().items(), mb.state_dict().values(), strict=True):
        assert torch.equal(v, w), k
    assert len(list((tmp_path / "part" / "cache").glob("*.cache"))) == 1  # built once, reused on resume


def test_resume_after_a_kill_logs_each_step_once(data, tmp_path):
    """A kill after checkpoint 4 loses the steps after it; the resumed run logs them again, once."""
    out = tmp_path / "run"
    cfg = quick(out, [data / "small.data"], batch_size=50, epochs=2, log_interval=2, checkpoint_interval=4)
    train(dataclasses.replace(cfg, stop_after_steps=4))
    at_4 = (out / "checkpoint.pt").read_bytes()
    train(TrainConfig(out=str(out), resume=True, workers=0, progress=False, stop_after_steps=3))
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [2, 4, 6]
    (out / "checkpoint.pt").write_bytes(at_4)  # as if killed at step 7: the last checkpoint is step 4's
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 7, "lo')  # and the kill cut a row short
    summary = train(TrainConfig(out=str(out), resume=True, workers=0, progress=False))
    assert summary["finished"] and summary["steps"] == 16
    # the run's intervals hold on resume (the defaults, 100 and 1000, are not taken from this call)
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == list(range(2, 17, 2))
    saved = read_checkpoint(out / "checkpoint.pt")["train_config"]
    assert (saved["log_interval"], saved["checkpoint_interval"]) == (2, 4)


def test_out_must_be_a_writable_directory(data, tmp_path):
    (tmp_path / "afile").write_text("x")
    for out, needle in [("afile", "is a file, not a directory"), ("afile/run", "afile is a file")]:
        with pytest.raises(UserError, match=needle):
            train(quick(tmp_path / out, [data / "small.data"], batch_size=50))
    with pytest.raises(UserError, match="fewer than one batch"):
        train(quick(tmp_path / "new" / "run", [data / "small.data"], batch_size=1000))
    assert not (tmp_path / "new").exists()


def test_lr_schedules():
    cfg = TrainConfig(warmup_steps=10, schedule="cosine", min_lr_ratio=0.1)
    assert lr_factor(0, cfg, 110, 11) == pytest.approx(0.1)
    assert lr_factor(9, cfg, 110, 11) == pytest.approx(1.0)
    assert lr_factor(60, cfg, 110, 11) == pytest.approx(0.55)
    assert lr_factor(110, cfg, 110, 11) == pytest.approx(0.1)
    step = TrainConfig(schedule="step", lr_gamma=0.5, lr_step_epochs=2)
    assert [lr_factor(s, step, 100, 10) for s in (0, 19, 20, 45)] == [1.0, 1.0, 0.5, 0.25]


def test_size_flags_override_the_preset(data, tmp_path):
    """--blocks/--channels/--fcl make the nets a size comparison needs, and the checkpoint says so."""
    r = run_cli(
        "--data",
        data / "small.data",
        "--network",
        "tiny",
        "--blocks",
        3,
        "--channels",
        24,
        "--fcl",
        40,
        "--batch-size",
        64,
        "--workers",
        0,
        "--no-progress",
        "--out",
        tmp_path / "run",
    )
    assert r.returncode == 0, r.stderr
    config = load_model(tmp_path / "run" / "model.pt").config
    assert (config.blocks, config.channels, config.fcl) == (3, 24, 40)


def run_cli(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, TRAIN, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_torchrun_two_processes_match_one(data, tmp_path):
    """2 gloo ranks x 32 positions == 1 process accumulating 2 x 32 (BatchNorm sees the same halves)."""
    common = ["--data", data / "small.data", "--network", "tiny", "--batch-size", 64, "--epochs", 1]
    common += ["--workers", 0, "--no-progress", "--lr", 0.05, "--seed", 5]
    single = run_cli(*common, "--out", tmp_path / "one", "--accum-steps", 2)
    assert single.returncode == 0, single.stderr
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ddp = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", TRAIN]
        + [str(a) for a in common]
        + ["--out", str(tmp_path / "two")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    # one summary line, whole (two ranks printing at once interleaved theirs when stdout is unbuffered)
    assert len(ddp.stdout.splitlines()) == 1 and json.loads(ddp.stdout)["steps"] == 6
    a = read_checkpoint(tmp_path / "one" / "checkpoint.pt")
    b = read_checkpoint(tmp_path / "two" / "checkpoint.pt")
    assert a["step"] == b["step"] == 6
    net = load_model(tmp_path / "one" / "model.pt")
    params = {name for name, _ in net.named_parameters()}
    for name in params:
        torch.testing.assert_close(a["model"][name], b["model"][name], rtol=1e-4, atol=1e-5)
    lines = (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == len((tmp_path / "one" / "metrics.jsonl").read_text().splitlines())  # rank 0 only
    assert json.loads(lines[-1])["step"] == 6


def test_cli_errors_are_one_line(data, tmp_path):
    corrupt = tmp_path / "bad.hcpe"
    corrupt.write_bytes(os.urandom(38 * 50))
    tiny = ["--network", "tiny"]
    cases = [
        (["--data", tmp_path / "nope.hcpe", *tiny], "no such file"),
        (["--data", corrupt, *tiny], "bad.hcpe"),
        (["--data", data / "test.hcpe", "--batch-size", 100000, *tiny], "fewer than one batch"),
        (["--data", data / "test.hcpe", "--init", tmp_path / "missing.pt"], "missing.pt"),
        (["--data", data / "test.hcpe", "--test", corrupt, *tiny], "bad.hcpe"),
        (
            ["--data", data / "test.hcpe", "--init", data / "any.pt", "--network", "small"],
            "conflicts with --init",
        ),
        (["--data", data / "test.hcpe", "--init", data / "any.pt", "--channels", 96], "--channels conflicts"),
        (["--data", data / "test.hcpe", "--blocks", 0, *tiny], "--blocks must be >= 1"),
    ]
    for args, needle in cases:
        r = run_cli(*args, "--out", tmp_path / "run", "--workers", 0, "--no-progress")
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("train: error:") and needle in last, r.stderr
    assert not (tmp_path / "run").exists()  # a run that fails on its inputs leaves no empty folder behind
    r = run_cli("--data", data / "test.hcpe", *tiny, "--out", corrupt / "run")
    assert r.returncode == 2 and r.stderr.strip() == (
        f"train: error: --out {corrupt / 'run'}: cannot be created: {corrupt} is a file, not a directory"
    )
    r = run_cli("--out", tmp_path / "fresh")
    assert r.returncode == 2 and "no --data" in r.stderr
    r = run_cli("--data", data / "test.hcpe")
    assert r.returncode == 2 and "--out RUN_DIR is required" in r.stderr
    r = run_cli("--evaluate", tmp_path / "model.pt")
    assert r.returncode == 2 and "--evaluate needs --test" in r.stderr


def test_the_committed_held_out_set_is_whole_and_measures_the_shipped_model(tmp_path):
    """models/heldout/fsf-200k.hcpe, which models/README's held-out figures are measured on: every record
    a position with a legal move and a game result (not a truncated copy or a Git LFS pointer), and the
    shipped model's top move is Fairy-Stockfish's clearly more often than a trivial rule's (0.21)."""
    import cshogi
    import numpy as np

    from engine.backends.choose import DEFAULT_MODEL

    path = os.path.join(REPO, "models", "heldout", "fsf-200k.hcpe")
    records = np.fromfile(path, cshogi.HuffmanCodedPosAndEval)
    assert len(records) == 1842 and os.path.getsize(path) == 1842 * 38
    board = cshogi.Board()
    for r in records:
        board.set_hcp(r["hcp"])
        assert board.is_legal(board.move_from_move16(int(r["bestMove16"])))
        assert r["gameResult"] in (cshogi.BLACK_WIN, cshogi.WHITE_WIN, cshogi.DRAW)
    measured = evaluate_checkpoint(DEFAULT_MODEL, [path], tmp_path / "cache")
    assert measured["test_positions"] == 1842
    assert measured["test_policy_acc"] > 0.25 and measured["test_value_acc"] > 0.6


def test_auto_batch_size_fits_small_data():
    """--batch-size left out: 1024, or for data under one such batch a power of two giving 8 steps."""
    assert auto_batch_size(100_000, 1) == 1024
    assert auto_batch_size(1024, 1) == 1024
    assert auto_batch_size(798, 1) == 64  # the Quick start's 8 games: 12 steps an epoch
    assert auto_batch_size(20, 1) == 2
    assert auto_batch_size(3, 1) == 1
    assert auto_batch_size(798, 3) == 63  # a multiple of processes x accumulation steps
    assert auto_batch_size(1, 4) == 4


def test_small_data_trains_with_an_automatic_batch_that_resume_keeps(data, tmp_path):
    out = tmp_path / "run"
    cfg = quick(out, [data / "small.data"], batch_size=None, stop_after_steps=5)
    first = train(cfg)
    assert first["steps_per_epoch"] == 400 // 32 and not first["finished"]
    assert read_checkpoint(out / "checkpoint.pt")["train_config"]["batch_size"] == 32
    rest = train(TrainConfig(out=str(out), resume=True, workers=0, progress=False))
    assert rest["finished"] and rest["steps"] == 400 // 32


def test_a_refused_run_removes_the_folder_it_made(data, tmp_path):
    """Data found too small only once the hcpe3 cache is built: the run folder and cache go again."""
    out = tmp_path / "new" / "run"
    with pytest.raises(UserError, match="fewer than one batch"):
        train(quick(out, [data / "games.hcpe3"], batch_size=1 << 20))
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    with pytest.raises(UserError, match="fewer than one batch"):
        train(quick(tmp_path / "kept", [data / "games.hcpe3"], batch_size=1 << 20))
    assert list((tmp_path / "kept").iterdir()) == []  # a folder the user had stays, without the cache
