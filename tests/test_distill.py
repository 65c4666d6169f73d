"""Teacher games for distillation (train/distill.py, bin/distill): every position carries the teacher's
own policy and value, the same command always makes the same file, and a stopped run continues it."""

import subprocess
import sys
import threading
from pathlib import Path

import cshogi
import numpy as np

from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.features import fill_features
from engine.core.moves import legal_moves_and_labels
from engine.core.network import build, preset
from engine.core.score import eval_to_value
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.selfplay.writer import VISIT_SCALE
from train.distill import DistillConfig, run_distill

REPO = Path(__file__).resolve().parent.parent
TEACHER = TorchEvaluator(build(preset("tiny"), seed=3), max_batch=4)


def test_every_position_carries_the_teachers_policy_and_value(tmp_path):
    out = tmp_path / "t.hcpe3"
    positions = run_distill(TEACHER, DistillConfig(out, games=3, seed=5, max_moves=40, progress=False))
    games = list(iter_hcpe3_games(out))
    assert len(games) == 3 and positions == sum(len(g.moves) for g in games)
    checked = 0
    for game in games:
        board = cshogi.Board()
        board.set_hcp(game.hcp)
        for info, cands in zip(game.moves, game.candidates, strict=True):
            moves, labels = legal_moves_and_labels(board)
            assert sorted(cands["move16"]) == sorted(int(m) & 0xFFFF for m in moves)  # every legal move
            fill_features(board, TEACHER.x1[0], TEACHER.x2[0])
            logits, value = TEACHER.evaluate(1)
            own = logits[0][labels].astype(np.float64)
            want = np.exp(own - own.max()) / np.exp(own - own.max()).sum()
            order = {int(m) & 0xFFFF: i for i, m in enumerate(moves)}
            got = np.zeros(len(moves))
            for c in cands:
                got[order[int(c["move16"])]] = c["visitNum"] / VISIT_SCALE
            assert np.abs(got - want).max() < 1e-4
            assert abs(eval_to_value(int(info["eval"])) - float(value[0])) < 2e-3
            assert info["selectedMove16"] in cands["move16"]
            board.push(board.move_from_move16(int(info["selectedMove16"])))
            checked += 1
        assert board.is_game_over() or board.move_number - 1 >= 40 or board.is_draw()
    assert checked == positions


def test_the_same_command_makes_the_same_file_and_a_stopped_run_continues_it(tmp_path):
    whole, resumed = tmp_path / "whole.hcpe3", tmp_path / "resumed.hcpe3"
    run_distill(TEACHER, DistillConfig(whole, games=5, seed=7, max_moves=30, progress=False))
    stop = threading.Event()
    run_distill(TEACHER, DistillConfig(resumed, games=5, seed=7, max_moves=30, progress=False), stop,
                on_game=lambda done: stop.set() if done == 2 else None)  # fmt: skip
    assert 2 <= len(list(iter_hcpe3_games(resumed))) < 5  # whole games only; those in flight are dropped
    run_distill(TEACHER, DistillConfig(resumed, games=5, seed=7, max_moves=30, progress=False))
    assert resumed.read_bytes() == whole.read_bytes()
    again = tmp_path / "again.hcpe3"
    run_distill(TEACHER, DistillConfig(again, games=5, seed=7, max_moves=30, progress=False))
    assert again.read_bytes() == whole.read_bytes()
    other = tmp_path / "other.hcpe3"
    run_distill(TEACHER, DistillConfig(other, games=5, seed=8, max_moves=30, progress=False))
    assert other.read_bytes() != whole.read_bytes()


def test_cli_rejects_bad_arguments_in_one_line(tmp_path):
    for args, needle in (
        (["--games", "0"], "--games must be >= 1"),
        (["--games", "2", "--temperature", "0"], "--temperature must be > 0"),
    ):
        cmd = [sys.executable, str(REPO / "bin" / "distill"), str(tmp_path / "x.hcpe3"), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and needle in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, str(REPO / "bin" / "distill"), str(tmp_path), "--games", "1"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode != 0 and "not a file" in proc.stderr and "Traceback" not in proc.stderr
