"""Self-play end to end with a random 'tiny' network: records replay legally and match the rules."""

import dataclasses
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import cshogi
import numpy as np
import pytest

from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.moves import NUM_MOVE_LABELS, labels_from_move16
from engine.core.network import build, preset, save_checkpoint
from engine.core.rules import RESULT_MASK, terminal
from engine.errors import UserError
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.search.gumbel_search import GumbelParams, GumbelSearch, search_position
from engine.search.gumbel_tree import TreeSearch
from engine.selfplay.config import SelfPlayConfig
from engine.selfplay.game import sample_move
from engine.selfplay.processes import run_selfplay
from train.data.readers import read_data

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def evaluator():
    return TorchEvaluator(build(preset("tiny"), seed=0), max_batch=128)


@pytest.mark.parametrize("search_type", [GumbelSearch, TreeSearch])
def test_mate_in_one_target_concentrates_on_mating_move(evaluator, search_type):
    board = cshogi.Board("4k4/9/4P4/9/9/9/9/9/4K4 b G 1")
    mate = board.mate_move_in_1ply()
    n_legal = len(list(board.legal_moves))
    params = GumbelParams(sims=2 * n_legal, considered=n_legal)
    result = search_position(board, evaluator, params, np.random.default_rng(0), search_type=search_type)
    i = result.moves.index(mate)
    # the default scale (0.1) moves the prior by sigma(q) ~ 5.6 logits: the mate is the target's likeliest
    # move, not all of it; scale 1 puts everything on it
    assert result.policy[i] == result.policy.max() and result.policy[i] > 0.5, result.policy[i]
    sharp_params = dataclasses.replace(params, c_scale=1.0)
    sharp = search_position(board, evaluator, sharp_params, np.random.default_rng(0), search_type=search_type)
    assert sharp.policy[i] > 0.99
    # the move played: at scale 0.1 the root's Gumbel noise (exploration) can outweigh 5.6 logits; at 1 not
    assert sharp.moves[sharp.choice] == mate
    assert result.value > 0.5
    assert board.sfen() == "4k4/9/4P4/9/9/9/9/9/4K4 b G 1"  # the search leaves the board as it was


@pytest.mark.parametrize("search_type", [GumbelSearch, TreeSearch])
def test_forced_move_needs_no_search(evaluator, search_type):
    board = cshogi.Board("k8/9/9/9/9/9/9/1r7/K1r6 b - 1")  # Black's king has one escape
    moves = list(board.legal_moves)
    assert len(moves) == 1
    result = search_position(
        board, evaluator, GumbelParams(sims=8), np.random.default_rng(0), search_type=search_type
    )
    assert result.moves == moves and result.policy.tolist() == [1.0]


def _replay_hcpe3(path: Path, max_moves: int) -> int:
    positions = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a partial game would warn
        games = list(iter_hcpe3_games(path))
    for game in games:
        board = cshogi.Board()
        board.set_hcp(game.hcp)
        assert game.opponent == 0
        for info, cands in zip(game.moves, game.candidates, strict=True):
            legal = sorted(cshogi.move16(m) for m in board.legal_moves)
            assert sorted(cands["move16"].tolist()) == legal
            total = cands["visitNum"].sum() / 65535
            assert abs(total - 1) <= len(cands) / 65535
            move = board.move_from_move16(int(info["selectedMove16"]))
            assert board.is_legal(move)
            assert terminal(board, max_moves) is None
            board.push(move)
            positions += 1
        end = terminal(board, max_moves)
        assert end is not None and end.result == game.result
    return positions


def test_hcpe3_games_replay_and_results_match_rules(evaluator, tmp_path):
    config = SelfPlayConfig(
        out_dir=tmp_path, games=6, parallel=4, sims=8, considered=8, max_moves=24,
        random_plies=4, seed=3, progress=False,
    )  # fmt: skip
    stats = run_selfplay(config, evaluator)
    files = list(tmp_path.glob("selfplay-*.hcpe3"))
    assert len(files) == 1 and stats.files == [str(files[0])]
    assert stats.games == 6
    assert _replay_hcpe3(files[0], 24) == stats.positions
    assert stats.black_wins + stats.white_wins + stats.draws == 6


def test_games_differ_and_seed_reproduces(evaluator, tmp_path):
    def run(out, seed):
        config = SelfPlayConfig(
            out_dir=out, games=3, parallel=3, sims=4, considered=4, max_moves=8, seed=seed, progress=False
        )
        run_selfplay(config, evaluator)
        (path,) = out.glob("*.hcpe3")
        return [g.moves["selectedMove16"].tolist() for g in iter_hcpe3_games(path)]

    a, b = run(tmp_path / "a", 1), run(tmp_path / "b", 1)
    assert sorted(a) == sorted(b)
    assert len({tuple(m) for m in a}) > 1


def test_data_format_round_trips(evaluator, tmp_path):
    config = SelfPlayConfig(
        out_dir=tmp_path,
        games=2,
        parallel=2,
        sims=4,
        considered=4,
        max_moves=10,
        format="data",
        progress=False,
    )
    stats = run_selfplay(config, evaluator)
    (path,) = tmp_path.glob("selfplay-*.data")
    data = read_data(path)
    assert len(data) == stats.positions == 20
    board = cshogi.Board()
    for rec in data:
        board.set_hcp(rec["hcp"])
        legal = np.array(list(board.legal_moves), dtype=np.int64)
        labels = labels_from_move16(legal, board.turn)
        assert rec["policy"].shape == (NUM_MOVE_LABELS,)
        assert abs(rec["policy"].sum() - 1) < 1e-5
        assert rec["policy"][labels].sum() == pytest.approx(rec["policy"].sum())
        assert rec["result"] == 0  # max-moves draw


def test_resignation_records_the_winner(evaluator, tmp_path):
    config = SelfPlayConfig(
        out_dir=tmp_path, games=2, parallel=2, sims=4, considered=4, max_moves=40,
        resign_threshold=0.99, resign_playout_fraction=0.0, progress=False,
    )  # fmt: skip
    stats = run_selfplay(config, evaluator)
    assert stats.resigned == 2
    (path,) = tmp_path.glob("*.hcpe3")
    for game in iter_hcpe3_games(path):
        board = cshogi.Board()
        for info in game.moves[:-1]:
            board.push(board.move_from_move16(int(info["selectedMove16"])))
        loser = board.turn  # the side to move at the last recorded position resigned
        assert game.result & RESULT_MASK == (2 if loser == cshogi.BLACK else 1)


def test_sample_move_temperature():
    rng = np.random.default_rng(0)
    policy = np.array([0.7, 0.2, 0.1])
    draws = [sample_move(policy, 1e-3, rng) for _ in range(50)]
    assert set(draws) == {0}
    draws = [sample_move(policy, 1.0, rng) for _ in range(400)]
    assert 0.6 < draws.count(0) / 400 < 0.8


def test_bad_config_is_a_user_error(tmp_path):
    from engine.errors import UserError

    with pytest.raises(UserError, match="--sims"):
        run_selfplay(SelfPlayConfig(out_dir=tmp_path, sims=0))
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        run_selfplay(SelfPlayConfig(out_dir=tmp_path / "f"))


def _wait_for_games(path_glob, out: Path, timeout: float = 60) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = list(out.glob(path_glob))
        if files and files[0].stat().st_size > 0:
            return files[0]
        time.sleep(0.2)
    raise AssertionError("no game written in time")


@pytest.mark.parametrize("processes", [1, 2])
def test_sigint_leaves_only_whole_games(tmp_path, processes):
    model = tmp_path / "tiny.pt"
    save_checkpoint(model, build(preset("tiny"), seed=0))
    out = tmp_path / "out"
    cmd = [
        sys.executable, str(REPO / "bin" / "selfplay"), "--model", str(model), "--backend", "torch",
        "--out", str(out), "--games", "100000", "--parallel", "4", "--sims", "4", "--considered", "4",
        "--max-moves", "16", "--processes", str(processes), "--threads", "1", "--no-progress",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        _wait_for_games("selfplay-*.hcpe3", out)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "interrupted" in stdout
    files = sorted(out.glob("selfplay-*.hcpe3"))
    assert 1 <= len(files) <= processes  # a file per process that finished a game: never an empty one
    assert all(f.stat().st_size for f in files)
    written = sum(_replay_hcpe3(f, 16) for f in files)
    assert written > 0
    assert f"{written} positions" in stdout


def test_cli_reports_bad_arguments(tmp_path):
    cmd = [sys.executable, str(REPO / "bin" / "selfplay"), "--out", str(tmp_path), "--parallel", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 2
    assert proc.stderr.strip() == "selfplay: error: --parallel must be >= 1"


def test_games_do_not_depend_on_how_many_groups_share_the_process(tmp_path):
    """Each game's moves and targets come from its own seed and search: splitting the games into 1, 2
    or 3 groups (leaf batches in flight) changes when rows are evaluated, not what is played."""
    from engine.backends.evaluator import UniformEvaluator

    def games(groups: int) -> list[tuple]:
        out = tmp_path / f"g{groups}"
        config = SelfPlayConfig(
            out_dir=out, games=6, parallel=6, groups=groups, sims=8, considered=4, max_moves=24,
            random_plies=4, seed=3, progress=False,
        )  # fmt: skip
        run_selfplay(config, UniformEvaluator(64))
        (path,) = out.glob("*.hcpe3")
        return sorted(
            (
                tuple(g.moves["selectedMove16"].tolist()),
                int(g.result),
                tuple(c["visitNum"].sum() for c in g.candidates),
            )
            for g in iter_hcpe3_games(path)
        )

    one = games(1)
    assert len(one) == 6 and len({g[0] for g in one}) > 1
    assert games(2) == one
    assert games(3) == one


def test_int8_self_play_runs_the_quantized_network(tmp_path, monkeypatch, capfd):
    """--int8 on a CPU: the games are played by the int8 model, quantized into the cache once."""
    monkeypatch.setenv("GUMBEL_SHOGI_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "tiny.pt"
    save_checkpoint(model, build(preset("tiny"), seed=0))
    config = SelfPlayConfig(
        out_dir=tmp_path / "out", games=3, parallel=3, sims=8, considered=4, max_moves=16, seed=1,
        model=str(model), backend="onnx", int8=True, progress=False,
    )  # fmt: skip
    stats = run_selfplay(config)
    assert "backend onnx-cpu-int8" in capfd.readouterr().err
    assert len(list((tmp_path / "cache").glob("*-int8-*.onnx"))) == 1
    (path,) = (tmp_path / "out").glob("*.hcpe3")
    assert stats.games == 3 and _replay_hcpe3(path, 16) == stats.positions


def test_playout_cap_randomisation_writes_targets_only_for_full_searches(tmp_path):
    """With --full-fraction, about that share of the moves carries a policy target (the legal moves,
    summing to 1); the others are recorded with no candidates, and their fast searches cost fewer
    network rows than full ones would."""
    from engine.backends.evaluator import UniformEvaluator

    def run(out: Path, fraction: float):
        config = SelfPlayConfig(
            out_dir=out, games=8, parallel=8, sims=16, full_fraction=fraction, fast_sims=2, considered=4,
            max_moves=40, seed=5, progress=False,
        )  # fmt: skip
        stats = run_selfplay(config, UniformEvaluator(64))
        (path,) = out.glob("*.hcpe3")
        return stats, list(iter_hcpe3_games(path))

    full_stats, _ = run(tmp_path / "full", 1.0)
    stats, games = run(tmp_path / "capped", 0.25)
    with_target = without = 0
    for game in games:
        board = cshogi.Board()
        board.set_hcp(game.hcp)
        for info, cands in zip(game.moves, game.candidates, strict=True):
            if len(cands):
                with_target += 1
                assert sorted(cands["move16"].tolist()) == sorted(cshogi.move16(m) for m in board.legal_moves)
                assert abs(cands["visitNum"].sum() / 65535 - 1) <= len(cands) / 65535
            else:
                without += 1
            board.push(board.move_from_move16(int(info["selectedMove16"])))
    assert with_target + without == stats.positions
    assert 0.1 < with_target / stats.positions < 0.45
    assert stats.nn_positions < 0.6 * full_stats.nn_positions * stats.positions / full_stats.positions


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"full_fraction": 0.0}, "--full-fraction"), ({"full_fraction": 0.5, "fast_sims": 64}, "--fast-sims")],
)
def test_bad_playout_cap_is_a_user_error(tmp_path, settings, message):
    from engine.errors import UserError

    with pytest.raises(UserError, match=message):
        run_selfplay(SelfPlayConfig(out_dir=tmp_path, sims=32, **settings))


def test_target_settings_reach_the_search_and_are_checked(tmp_path):
    config = SelfPlayConfig(
        out_dir=tmp_path / "sp",
        c_scale=0.1,
        q_transform="absolute",
        policy_target="visits",
        value_target="policy",
    )
    config.validate()
    for fast in (False, True):
        p = config.search_params(fast)
        assert (p.c_scale, p.rescale, p.policy_target, p.value_target) == (0.1, False, "visits", "policy")
    for bad, flag in (("q_transform", "--q-transform"), ("policy_target", "--policy-target"),
                      ("value_target", "--value-target")):  # fmt: skip
        with pytest.raises(UserError, match=flag):
            SelfPlayConfig(out_dir=tmp_path / "sp", **{bad: "rescaled"}).validate()
