"""Self-play on a real local Ray cluster of two nodes (`ray.cluster_utils.Cluster`, one CPU each): games
from both nodes arrive whole and exactly once, a killed actor loses nothing, and a driver stopped by
SIGTERM leaves a folder that a rerun completes. Skipped without Ray (the `cluster` extra; CI has it)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from engine.core.network import build, preset, save_checkpoint  # noqa: E402
from engine.errors import UserError  # noqa: E402
from engine.records.hcpe3_games import iter_hcpe3_games  # noqa: E402
from engine.selfplay.cluster import (  # noqa: E402
    ClusterSelfPlay,
    IdSource,
    Target,
    run_cluster_selfplay,
)
from engine.selfplay.config import SelfPlayConfig  # noqa: E402
from engine.selfplay.ray_connect import connect  # noqa: E402
from engine.selfplay.run_folder import RunWriter, read_done, read_manifest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# The first test also pays for the cluster's start and, on a fresh install, Ray compiling its modules in
# every worker: over 240 s once on two cores busy with other work (2026-12-05). A hang still fails.
pytestmark = pytest.mark.timeout(480)


@pytest.fixture(scope="module")
def cluster():
    """A head and a second node, one CPU each, no dashboard; torn down after the module."""
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    try:
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cluster-model") / "tiny.pt"
    save_checkpoint(path, build(preset("tiny"), seed=0))
    return path


def small(out: Path, model: Path, games: int, **kw) -> SelfPlayConfig:
    """Short games of a tiny network on the torch CPU backend, one thread."""
    settings = dict(parallel=2, sims=4, considered=4, max_moves=16, backend="torch", threads=1)
    settings.update(kw)
    return SelfPlayConfig(out_dir=out, games=games, model=str(model), progress=False, **settings)


def check_folder(out: Path, games: int) -> list[dict]:
    """Exactly `games` whole games, ids 0..games-1 each once; the manifest lines."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn game would warn
        whole = sum(len(list(iter_hcpe3_games(f))) for f in out.glob("*.hcpe3"))
    done = read_done(out)
    ids = [r["id"] for r in done.rows]
    assert whole == done.games == games
    assert sorted(ids) == list(range(games)), ids
    return done.rows


def test_games_from_both_nodes_arrive_whole_and_the_count_is_exact(cluster, model, tmp_path):
    out = tmp_path / "out"
    report = run_cluster_selfplay(small(out, model, 8), cluster.address)
    assert (report.written, report.interrupted) == (8, False)
    rows = check_folder(out, 8)
    assert len({r["node"] for r in rows}) == 2, rows  # both nodes played
    assert len(report.nodes) == 2 and sum(report.nodes.values()) == 8
    assert len({r["model"] for r in rows}) == 1
    again = run_cluster_selfplay(small(out, model, 8), cluster.address)  # nothing is missing: no work
    assert again.written == 0
    check_folder(out, 8)


def test_a_killed_actor_loses_no_finished_game_and_the_run_completes(cluster, model, tmp_path):
    out = tmp_path / "out"
    games = 12
    pool = ClusterSelfPlay(small(out, model, games, parallel=1), cluster.address, unit_games=3)
    killed: list[int] = []
    try:
        pool.publish(str(model))
        victim = pool.slots[0]
        pid = ray.get(victim.actor.info.remote())["pid"]
        target = Target(out, games, 0, RunWriter(out))

        def kill_after_its_first_game() -> None:
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline:
                if victim.games >= 1 and victim.undelivered:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_after_its_first_game, daemon=True)
        killer.start()
        pool.collect([target], IdSource(range(games)), threading.Event())
        killer.join()
        pool.stop_actors([target])
        target.writer.close()
    finally:
        pool.close()
    assert killed, "the actor never delivered a game before the run ended"
    assert pool.restarts >= 1
    check_folder(out, games)


def test_sigterm_to_the_driver_then_a_rerun_reaches_the_target(cluster, model, tmp_path):
    out = tmp_path / "out"
    games = 16
    cmd = [
        sys.executable, str(REPO / "bin" / "selfplay"), "--ray", cluster.address, "--out", str(out),
        "--games", str(games), "--model", str(model), "--backend", "torch", "--parallel", "1",
        "--sims", "4", "--considered", "4", "--max-moves", "24", "--threads", "1", "--no-progress",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 150
        while not any(f.stat().st_size for f in out.glob("*.hcpe3")):
            assert time.monotonic() < deadline and proc.poll() is None, "no game written in time"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    first = read_done(out)
    assert 1 <= first.games == len(first.ids) < games  # stopped early, every written game has its id
    assert "interrupted" in stdout, stdout
    report = run_cluster_selfplay(small(out, model, games, parallel=1, max_moves=24), cluster.address)
    assert report.written == games - first.games
    check_folder(out, games)


def test_bad_addresses_and_a_gpu_less_cluster_are_one_line_errors(cluster, model, tmp_path):
    with pytest.raises(UserError, match="no Ray head answers there"):
        connect("127.0.0.1:1")
    with pytest.raises(UserError, match="expected auto or HOST:PORT"):
        connect("no-port")
    config = small(tmp_path / "out", model, 2, backend="trt")
    with pytest.raises(UserError, match="--trt: the Ray cluster has no GPU"):
        run_cluster_selfplay(config, cluster.address)
    assert not (tmp_path / "out").exists()


def test_the_loop_on_the_cluster_trains_while_the_actors_play(cluster, tmp_path):
    from train.loop.config import LoopConfig, RunPaths
    from train.loop.main import run_loop

    lines: list[str] = []
    cfg = LoopConfig(
        dir=str(tmp_path / "run"), generations=2, network="tiny", games="4", sims="4", parallel="2",
        max_moves=16, batch_size="32", eval_games=0, greedy=False, progress=False, ray=cluster.address,
    )  # fmt: skip
    rows = run_loop(cfg, log=lines.append)
    assert [r["generation"] for r in rows] == [1, 2]
    paths = RunPaths(tmp_path / "run")
    ids = []
    for g in (1, 2):
        done = read_done(paths.selfplay(g))
        assert done.games == len(done.rows) == 4  # exactly the target, each game with its manifest line
        ids += [r["id"] for r in done.rows]
        assert {r["model"] for r in done.rows} <= {"gen0", "gen1"}
    assert len(ids) == len(set(ids))  # no game twice, across generations
    assert any("self-play utilisation" in line for line in lines), lines


def test_a_node_leaving_mid_run_loses_and_repeats_no_game(cluster, model, tmp_path):
    out = tmp_path / "out"
    games = 12
    node = cluster.add_node(num_cpus=1)  # a third node, removed once it has delivered a game
    cluster.wait_for_nodes()
    label = "/" + node.node_id[:6]
    removed: list[bool] = []

    def remove_after_its_first_game() -> None:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            rows = [r for f in out.glob("*.games.jsonl") for r in read_manifest(f)]
            if any(label in r["node"] for r in rows):
                cluster.remove_node(node)
                removed.append(True)
                return
            time.sleep(0.05)

    remover = threading.Thread(target=remove_after_its_first_game, daemon=True)
    remover.start()
    report = run_cluster_selfplay(small(out, model, games, parallel=1), cluster.address, unit_games=2)
    remover.join()
    assert removed, "the third node never delivered a game before the run ended"
    assert report.written == games and report.restarts >= 1 and not report.interrupted
    check_folder(out, games)


def test_evaluation_games_as_ray_tasks_are_the_local_match(cluster, model, tmp_path):
    """The same deterministic engines (the policy's best move) give the same games, W/L/D and CSA files
    whether the match is played here or fanned out as tasks over the cluster's nodes."""
    from engine.match.openings import random_openings
    from engine.usi_client import EngineSpec
    from train.loop.cluster_eval import ray_matches
    from train.loop.config import LoopConfig
    from train.loop.steps import USI_ENGINE, EvalMatch, eval_limits, local_matches

    cfg = LoopConfig(eval_games=4, eval_nodes=1, eval_max_moves=24, eval_timeout=60.0, progress=False)
    options = {"DNN_Model": str(model), "Backend": "torch", "Search_Mode": "policy", "Threads": "1"}
    me, other = (EngineSpec(str(USI_ENGINE), options, name) for name in ("gen1", "gen0"))
    openings = random_openings(2, 4, seed=3)
    match = EvalMatch(me, other, eval_limits(cfg, "prev"), openings, tmp_path / "ray")
    connect(cluster.address)
    try:
        remote = ray_matches(ray, cfg, threading.Event())(match)
    finally:
        ray.shutdown()
    with local_matches(cfg) as play:
        local = play(dataclasses.replace(match, csa_dir=tmp_path / "local"))
    assert remote.summary() == local.summary()
    assert remote.wins + remote.losses + remote.draws == 4
    assert not {"crash", "timeout"} & set(remote.summary()["reasons"])  # games played, not lost engines
    names = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert (
        names
        == sorted(p.name for p in (tmp_path / "ray").iterdir())
        == [f"game-{i:04d}.csa" for i in range(1, 5)]
    )
    for name in names:
        assert (tmp_path / "ray" / name).read_text() == (tmp_path / "local" / name).read_text()


@pytest.mark.timeout(600)
def test_the_loop_with_a_model_age_window_resumes_after_sigterm(cluster, tmp_path):
    """bin/loop --ray --max-model-age 1, stopped by SIGTERM once generation 1's games are in, then
    rerun: every folder holds exactly its games, each once and kept across the stop, all played by the
    model one generation old; training read only those; the evaluation's games were Ray tasks."""
    from train.loop.config import LoopConfig, LoopState, RunPaths
    from train.loop.main import run_loop

    run = tmp_path / "run"
    settings = dict(
        dir=str(run), generations=2, network="tiny", games="4", sims="4", parallel="2", max_moves=16,
        batch_size="32", eval_games=2, eval_nodes=4, eval_max_moves=24, greedy=False, progress=False,
        ray=cluster.address, max_model_age=1,
    )  # fmt: skip
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in settings.items() if k not in ("greedy", "progress")]
    cmd = [sys.executable, str(REPO / "bin" / "loop"), *flags, "--no-greedy", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    paths = RunPaths(run)
    try:
        deadline = time.monotonic() + 300
        while not (paths.state.is_file() and LoopState.load(paths.state, "tiny").done(1, "selfplay")):
            assert time.monotonic() < deadline and proc.poll() is None, "generation 1's games never came"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "rerun the same command to continue" in stderr, stderr
    before = {g: {r["id"] for r in read_done(paths.selfplay(g)).rows} for g in (1, 2)}
    assert len(before[1]) == 4

    rows = run_loop(LoopConfig(**settings), log=lambda _: None)
    assert [r["generation"] for r in rows] == [1, 2]
    state = LoopState.load(paths.state, "tiny")
    ids = []
    for g in (1, 2):
        done = read_done(paths.selfplay(g))
        assert done.games == len(done.rows) == 4
        assert before[g] <= {r["id"] for r in done.rows}  # nothing written before the stop was lost
        ids += [r["id"] for r in done.rows]
        assert {r["model"] for r in done.rows} == {f"gen{g - 1}"}  # too old a model's games left out
        trained = state.gen(g)["train"]["files"]
        assert trained and all(f"-gen{g - 1}." in name for name in trained), trained
        matches = state.gen(g)["eval"]["matches"]
        assert all(m["wins"] + m["losses"] + m["draws"] == m["games"] == 2 for m in matches.values())
        played = {d.name: len(list(d.glob("game-*.csa"))) for d in (paths.gen(g) / "eval").iterdir()}
        assert "prev" in played and set(played) <= set(matches) and set(played.values()) == {2}, played
    assert len(ids) == len(set(ids))  # no game twice, across generations and the two runs
