"""The loop's recipe settings: playout-cap randomisation (--full-fraction), gating against the best
generation so far (--gate); the window by positions and the anchor share are in test_loop_window.py."""

from __future__ import annotations

import json

import pytest

from engine.errors import UserError
from tests.test_loop import tiny
from train.loop.config import LoopConfig, LoopState, RunPaths
from train.loop.main import run_loop
from train.loop.steps import best_before, count_targets, opponents


def test_gate_keeps_the_newest_accepted_generation(tmp_path):
    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir()
    state = LoopState(paths.state, "tiny")
    for g, accepted in ((1, False), (2, True), (3, False)):
        state.finish(g, "eval", {"matches": {}, "accepted": accepted})
    gated = tiny(paths.root, gate=0.55, greedy=False)
    assert [best_before(gated, paths, g) for g in (1, 2, 3, 4)] == [0, 0, 2, 2]
    assert [best_before(tiny(paths.root), paths, g) for g in (1, 2, 3, 4)] == [0, 1, 2, 3]
    found = opponents(gated, paths, 4)
    assert found["prev"].options["DNN_Model"] == str(paths.onnx(2))
    assert set(found) == {"prev", "gen0"}
    assert set(opponents(gated, paths, 2)) == {"prev"}  # gen 0 is the best: one match
    for bad in ({"gate": 1.0}, {"gate": -0.1}, {"gate": 0.5, "eval_games": 0}):
        with pytest.raises(UserError, match="--gate"):
            tiny(paths.root, **bad).validate()


def test_capped_gated_loop_trains_on_full_searches_only(tmp_path):
    run = tmp_path / "run"
    cfg = tiny(
        run, generations=2, games="4", sims="8", full_fraction=0.5, fast_sims=2, gate=0.6, greedy=False
    )
    rows = run_loop(cfg, lambda _: None)
    assert [r["generation"] for r in rows] == [1, 2]
    state = json.loads(RunPaths(run).state.read_text())["generations"]
    for g in ("1", "2"):
        train, selfplay = state[g]["train"], state[g]["selfplay"]
        files = [RunPaths(run).selfplay(k) / f for k in (1, 2) for f in train["files"]]
        targets = sum(count_targets(f) for f in files if f.exists())
        assert train["selfplay_positions"] == targets == train["positions"]  # no fast-search positions
        assert 0 < targets < selfplay["positions"] * (1 if g == "1" else 2)
    first = state["1"]["eval"]
    assert first["accepted"] == (first["matches"]["prev"]["score"] >= 0.6)
    best = 1 if first["accepted"] else 0
    assert state["2"]["eval"]["matches"]["prev"]["engine2"] == f"gen{best}"
    assert state["2"]["eval"]["best"] in (2, best)


def test_loop_config_checks_the_recipe_flags(tmp_path):
    for bad, flag in (
        ({"full_fraction": 0.0}, "--full-fraction"),
        ({"full_fraction": 0.5, "fast_sims": 64}, "--fast-sims"),
        ({"window_positions": -1}, "--window-positions"),
        ({"extra_share": 0.3}, "--extra-share"),
        ({"extra_share": 1.0, "extra_data": str(tmp_path)}, "--extra-share"),
    ):
        with pytest.raises(UserError, match=flag):
            LoopConfig(**{**tiny(tmp_path / "run").__dict__, **bad}).validate()


def test_recipe_flags_reach_self_play(tmp_path):
    from train.loop.config import selfplay_config

    cfg = tiny(tmp_path / "run", sims="64", full_fraction=0.25, fast_sims=16, int8=True)
    config = selfplay_config(cfg, 1, tmp_path / "sp", tmp_path / "model.onnx")
    assert (config.sims, config.full_fraction, config.fast_search_sims, config.int8) == (64, 0.25, 16, True)
    assert selfplay_config(tiny(tmp_path / "run"), 1, tmp_path / "sp", tmp_path / "m.onnx").capped is False


def test_a_fixed_external_engine_is_an_elo_anchor_with_its_own_limit(tmp_path):
    """--eval-engine (gpsshogi at a fixed depth, say) plays every generation with its own `go` limit:
    an engine that aborts on `go nodes`, as gpsusi does, still finishes the match, and the generation's
    line and plot carry it."""
    from tests.test_match import fake_engine

    first_legal = "cshogi.move_to_usi(next(iter(board.legal_moves)))"
    engine = fake_engine(tmp_path, "no_nodes", f"sys.exit(3) if 'nodes' in w else {first_legal}")
    run = tmp_path / "run"
    cfg = tiny(
        run, eval_engine=engine, eval_engine_option="LimitDepth=5", eval_engine_byoyomi=50, greedy=False
    )
    assert opponents(cfg, RunPaths(run), 1)["engine"].options == {"LimitDepth": "5"}
    lines: list[str] = []
    (row,) = run_loop(cfg, lines.append)
    assert "gen 1: 2 games vs no_nodes (4 nodes/move; it: byoyomi 50)" in lines
    vs = row["vs_engine"]
    assert vs["wins"] + vs["losses"] + vs["draws"] == cfg.eval_games
    match = json.loads(RunPaths(run).state.read_text())["generations"]["1"]["eval"]["matches"]["engine"]
    assert not {"crash", "timeout"} & set(match["reasons"])  # it played: never sent `go nodes`
    assert RunPaths(run).plot.stat().st_size > 0
    for bad, message in (
        ({"eval_engine": engine}, "--eval-engine needs its search limit"),
        ({"eval_engine": engine, "eval_engine_nodes": -1, "eval_engine_byoyomi": 5}, "limits must be"),
        ({"eval_engine": engine, "eval_engine_byoyomi": 5, "eval_engine_option": "LimitDepth"}, "NAME=VALUE"),
    ):
        with pytest.raises(UserError, match=message):
            tiny(run, **bad).validate()


def test_target_and_trainer_flags_reach_self_play_and_training(tmp_path, monkeypatch):
    """bin/loop's target settings reach every generation's search, and --hcpe3-average, --mirror,
    --ema and --val-lambda reach its training, as bin/selfplay and bin/train take them."""
    import importlib.machinery
    import importlib.util
    import shutil

    import train.trainer.run
    from tests.conftest import REPO
    from train.loop.config import selfplay_config
    from train.loop.steps import Interrupted, step_train

    loader = importlib.machinery.SourceFileLoader("bin_loop", str(REPO / "bin" / "loop"))
    bin_loop = importlib.util.module_from_spec(importlib.util.spec_from_loader("bin_loop", loader))
    loader.exec_module(bin_loop)
    flags = "--c-scale 0.1 --q-transform absolute --policy-target visits --value-target chosen"
    flags += " --no-hcpe3-average --mirror 0.25 --ema 0.99 --val-lambda 1"
    args = vars(bin_loop.parser().parse_args(["--dir", str(tmp_path / "run"), *flags.split()]))
    names = "c_scale q_transform policy_target value_target hcpe3_average mirror ema val_lambda".split()
    cfg = LoopConfig(**{**tiny(tmp_path / "run").__dict__, **{k: args[k] for k in names}})
    params = selfplay_config(cfg, 1, tmp_path / "sp", tmp_path / "m.onnx").search_params()
    assert (params.c_scale, params.rescale, params.policy_target, params.value_target) == (
        0.1, False, "visits", "chosen",
    )  # fmt: skip
    assert (
        selfplay_config(cfg, 1, tmp_path / "sp", tmp_path / "m.onnx").search_params(fast=True).rescale
        is False
    )
    seen = {}

    def fake_train(config):
        seen.update(vars(config))
        return {"finished": False, "stopped_by": "test"}

    monkeypatch.setattr(train.trainer.run, "train", fake_train)
    sp = RunPaths(tmp_path / "run").selfplay(1)
    sp.mkdir(parents=True)
    shutil.copy(next((REPO / "models" / "heldout" / "miniosl-seed2").glob("*.hcpe3")), sp / "games.hcpe3")
    with pytest.raises(Interrupted, match="training stopped"):
        step_train(cfg, RunPaths(tmp_path / "run"), 1, lambda _: None)
    assert (seen["hcpe3_average"], seen["mirror"], seen["ema"], seen["val_lambda"]) == (
        False,
        0.25,
        0.99,
        1.0,
    )
    # the defaults: stage 9's training flags, the measured targets (docs/selfplay.md#targets)
    d = vars(bin_loop.parser().parse_args([]))
    assert (d["hcpe3_average"], d["mirror"], d["val_lambda"]) == (True, 0.5, 0.8)
    assert (d["c_scale"], d["q_transform"], d["value_target"]) == (0.1, "minmax", "policy")
    with pytest.raises(SystemExit):
        bin_loop.parser().parse_args(["--value-target", "best"])
