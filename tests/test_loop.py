"""The learning loop end to end on CPU (tiny network, few games), interrupted and resumed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import UserError
from train.loop.config import LoopConfig, LoopState, RunPaths, at_generation, parse_schedule
from train.loop.main import run_loop
from train.loop.run import init_generation0
from train.loop.steps import Interrupted, count_games, opponents, step_selfplay, window_files

REPO = Path(__file__).resolve().parent.parent


def tiny(run: Path, **overrides) -> LoopConfig:
    base = dict(
        dir=str(run),
        generations=1,
        network="tiny",
        games="3",
        sims="4",
        parallel="4",
        max_moves=24,
        window="8",
        batch_size="32",
        lr="0.01",
        eval_games=2,
        eval_nodes=4,
        eval_max_moves=16,
        eval_random_plies=2,
        eval_batch=4,
        eval_timeout=60.0,
        hcpe3_average=False,  # every self-play position a training position: the tests count them
        progress=False,
    )
    return LoopConfig(**{**base, **overrides})


def test_schedules():
    assert parse_schedule("100:200:400") == [100, 200, 400]
    assert [at_generation([100, 200, 400], g) for g in (1, 2, 3, 4, 9)] == [100, 200, 400, 400, 400]
    assert parse_schedule("0.1:0.05", float) == [0.1, 0.05]
    for bad in ("", "1:x", "0", "5:-1"):
        with pytest.raises(UserError):
            parse_schedule(bad)


class Stop(Exception):
    pass


def stop_after(g_stop: int, step_stop: str):
    def hook(g: int, step: str) -> None:
        if (g, step) == (g_stop, step_stop):
            raise Stop

    return hook


def test_two_generations_interrupted_and_resumed(tmp_path):
    run = tmp_path / "run"
    log: list[str] = []
    cfg = tiny(run)
    paths = RunPaths(run)
    state = LoopState.load(paths.state, cfg.network)
    # A self-play killed after 2 of 3 games: its whole games stay in the folder.
    init_generation0(cfg, paths, state, log.append)
    partial = step_selfplay(tiny(run, games="2"), paths, 1, log.append)
    assert partial["games"] == 2 and count_games(paths.selfplay(1))[0] == 2

    # Generation 1 stops right after training (as if interrupted before the export).
    with pytest.raises(Stop):
        run_loop(cfg, log.append, on_step=stop_after(1, "train"))
    state = json.loads(paths.state.read_text())["generations"]
    assert set(state["1"]) == {"selfplay", "train"}
    assert state["1"]["selfplay"]["games"] == 3 and state["1"]["selfplay"]["games_this_session"] == 1
    assert not paths.onnx(1).exists() and not paths.jsonl.exists()
    trained = paths.checkpoint(1).stat().st_mtime_ns
    selfplay_files = {f: f.stat().st_mtime_ns for f in paths.selfplay(1).iterdir()}

    # Rerun to two generations: generation 1 continues at export, nothing finished is redone.
    steps: list[tuple[int, str]] = []
    rows = run_loop(tiny(run, generations=2, anchor=1), log.append, on_step=lambda g, s: steps.append((g, s)))
    assert steps == [(1, "export"), (1, "eval"), (2, "selfplay"), (2, "train"), (2, "export"), (2, "eval")]
    assert paths.checkpoint(1).stat().st_mtime_ns == trained
    assert {f: f.stat().st_mtime_ns for f in paths.selfplay(1).iterdir()} == selfplay_files
    state = json.loads(paths.state.read_text())["generations"]
    assert state["1"]["train"]["finished_at"] < state["1"]["export"]["finished_at"]

    # What each generation records.
    assert [r["generation"] for r in rows] == [1, 2]
    for r in rows:
        assert r["games"] == 3 and r["positions"] > 0 and r["policy_loss"] > 0
        for key in ("vs_prev", "vs_gen0", "vs_greedy"):
            m = r[key]
            assert m["wins"] + m["losses"] + m["draws"] == 2
    assert rows[0]["vs_prev"] == rows[0]["vs_gen0"]  # generation 1's previous model is generation 0
    # --anchor 1 is generation 2's previous model: the same match
    assert "vs_anchor" not in rows[0] and rows[1]["vs_anchor"] == rows[1]["vs_prev"]
    assert rows[1]["ladder_elo"] == pytest.approx(rows[0]["ladder_elo"] + rows[1]["vs_prev"]["elo"])
    assert len(paths.jsonl.read_text().splitlines()) == 2
    assert (run / "strength.png").stat().st_size > 1000
    assert len(list((paths.gen(2) / "eval" / "greedy").glob("*.csa"))) == 2
    assert window_files(paths, 2, 1) == sorted(paths.selfplay(2).glob("*.hcpe3"))[-1:]

    # Everything done: a rerun changes nothing.
    steps.clear()
    assert run_loop(tiny(run, generations=2), log.append, on_step=lambda g, s: steps.append((g, s))) == rows
    assert steps == []


def test_anchor_generation_is_a_fixed_opponent_of_every_later_one(tmp_path):
    paths = RunPaths(tmp_path / "run")
    for g, expected in ((2, set()), (3, {"anchor"}), (9, {"anchor"})):
        found = opponents(tiny(paths.root, anchor=1, greedy=False), paths, g)
        assert set(found) - {"prev", "gen0"} == expected
        if expected:
            assert found["anchor"].options["DNN_Model"] == str(paths.onnx(1))
            assert found["prev"].options["DNN_Model"] == str(paths.onnx(g - 1))
    assert "anchor" not in opponents(tiny(paths.root), paths, 9)
    with pytest.raises(UserError, match="--anchor"):
        tiny(paths.root, anchor=-1).validate()


def test_loop_cli_errors(tmp_path):
    for args, message in (
        (["--games", "10:0"], "--games"),
        (["--generations", "0"], "--generations"),
        (["--network", "huge"], "invalid choice"),
    ):
        out = subprocess.run(
            [sys.executable, str(REPO / "bin" / "loop"), "--dir", str(tmp_path / "r"), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_interrupted_step_is_not_marked_done(tmp_path, monkeypatch):
    import train.loop.run as loop

    def interrupted(*_args, **_kw):
        raise Interrupted("gen 1: self-play interrupted")

    monkeypatch.setattr(loop, "step_selfplay", interrupted)
    with pytest.raises(Interrupted):
        run_loop(tiny(tmp_path / "run", eval_games=0), lambda m: None)
    state = json.loads((tmp_path / "run" / "state.json").read_text())["generations"]
    assert "1" not in state and "export" in state["0"]


def test_loop_starts_from_an_init_checkpoint_and_still_meets_a_random_reference(tmp_path):
    import torch

    from engine.core.network import build, load_model, preset, save_checkpoint

    init = tmp_path / "supervised.pt"
    save_checkpoint(init, build(preset("tiny", fcl=24), seed=5))
    run = tmp_path / "run"
    rows = run_loop(tiny(run, init=str(init), games="2", greedy=False), lambda _: None)
    paths = RunPaths(run)
    gen0, source = load_model(paths.checkpoint(0)), load_model(init)
    assert gen0.config.fcl == 24  # the run takes the init's architecture, not --network's preset
    for a, b in zip(gen0.state_dict().values(), source.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    random_ref = load_model(paths.random_checkpoint)
    assert random_ref.config == source.config
    assert not torch.equal(random_ref.state_dict()["l1_1_1.weight"], source.state_dict()["l1_1_1.weight"])
    assert paths.random_onnx.is_file()
    assert set(rows[0]) >= {"vs_prev", "vs_random"}
    assert rows[0]["vs_random"]["wins"] + rows[0]["vs_random"]["losses"] + rows[0]["vs_random"]["draws"] == 2


def test_extra_data_is_mixed_into_every_generations_training(tmp_path):
    from train.data.readers import read_hcpe
    from train.data.synthetic import write_hcpe

    anchor = tmp_path / "anchor.hcpe"
    write_hcpe(anchor, 300, seed=4)
    run = tmp_path / "run"
    held_out = tmp_path / "held_out.hcpe"
    write_hcpe(held_out, 70, seed=9)
    cfg = tiny(run, extra_data=str(anchor), test=str(held_out), val_lambda=0.5, eval_games=0, greedy=False)
    rows = run_loop(cfg, lambda _: None)
    trained = json.loads(RunPaths(run).state.read_text())["generations"]["1"]["train"]["positions"]
    # every self-play position carries a policy target here, so the trainer saw both sets whole
    assert trained == rows[0]["positions"] + len(read_hcpe(anchor))
    # the generation is measured on the held-out records, and the row says so
    held = rows[0]["held_out"]
    assert held["test_positions"] == 70
    assert 0.0 <= held["test_policy_acc"] <= 1.0 and held["test_value_loss"] > 0
    assert (RunPaths(run).plot).is_file()
    with pytest.raises(UserError, match="--extra-data"):
        tiny(run, extra_data=str(tmp_path / "missing.hcpe")).validate()
    with pytest.raises(UserError, match="--test"):
        tiny(run, test=str(tmp_path / "missing.hcpe")).validate()
