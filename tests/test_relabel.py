"""Other players' games relabelled by a distillation teacher (train/teachers/relabel.py, bin/distill OUT
--relabel SRC): the source's moves and results are kept and every position gets the teacher's targets,
a teacher given its own games gives them back unchanged, a stopped run continues to the same file, and
bad sources or settings are one error line that leaves nothing."""

import subprocess
import sys
import threading
from pathlib import Path

import cshogi
import numpy as np
import pytest

from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.network import build, preset
from engine.core.score import eval_to_value
from engine.errors import UserError
from engine.records.formats import Hcpe3Game
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.records.writers import Hcpe3Writer
from tests.test_distill import Recording  # a teacher that remembers what it was shown
from train.teachers.distill import DistillConfig, compact_targets, run_distill
from train.teachers.distill_openings import OpeningPlan
from train.teachers.network_teacher import NetworkTeacher
from train.teachers.relabel import SETTINGS_SUFFIX, RelabelConfig, run_relabel
from train.teachers.teacher import GamePosition

REPO = Path(__file__).resolve().parent.parent
PLAYER = NetworkTeacher(TorchEvaluator(build(preset("tiny"), seed=3), max_batch=4))
TEACHER = NetworkTeacher(TorchEvaluator(build(preset("tiny"), seed=4), max_batch=4))


@pytest.fixture
def source(tmp_path) -> Path:
    """Five games of another player, from random openings (so not from the start position)."""
    path = tmp_path / "src" / "games.hcpe3"
    plan = OpeningPlan(random_plies=4)
    run_distill(PLAYER, DistillConfig(path, games=5, seed=1, max_moves=30, openings=plan, progress=False))
    return path


def relabel(sources: list[Path], out: Path, **extra) -> RelabelConfig:
    settings = {"top_mass": 0.9, "top_k": 6, **extra}
    return RelabelConfig(sources, out, teacher="tiny-4", progress=False, **settings)


def test_the_source_moves_and_results_stay_and_every_position_gets_the_teachers_targets(source, tmp_path):
    out = tmp_path / "out.hcpe3"
    stats = run_relabel(TEACHER, relabel([source], out))
    before, after = list(iter_hcpe3_games(source)), list(iter_hcpe3_games(out))
    assert stats.games == len(after) == 5 and stats.positions == sum(len(g.moves) for g in before)
    assert not stats.interrupted and stats.bytes == out.stat().st_size
    for src, game in zip(before, after, strict=True):
        assert (game.hcp == src.hcp).all() and (game.result, game.opponent) == (src.result, src.opponent)
        assert game.moves["selectedMove16"].tolist() == src.moves["selectedMove16"].tolist()
        board = cshogi.Board()
        board.set_hcp(src.hcp)
        for info, cands in zip(game.moves, game.candidates, strict=True):
            judged = TEACHER.judge([GamePosition(board.sfen(), (), board)])[0]
            move16s = (judged.moves & 0xFFFF).tolist()
            played = move16s.index(int(info["selectedMove16"]))
            keep, visits = compact_targets(judged.policy, played, 0.9, 6)
            assert cands["move16"].tolist() == [move16s[k] for k in keep]
            assert cands["visitNum"].tolist() == visits.tolist()
            assert abs(eval_to_value(int(info["eval"])) - judged.value) < 2e-3
            board.push(judged.moves[played])
    assert out.with_name(out.name + SETTINGS_SUFFIX).is_file()


def test_a_teacher_given_its_own_games_gives_them_back_and_the_history_reaches_it(source, tmp_path):
    out = tmp_path / "same.hcpe3"
    run_relabel(PLAYER, relabel([source], out, top_mass=0.99, top_k=16))
    assert out.read_bytes() == source.read_bytes()  # distill's defaults, the same targets
    shown = Recording(TEACHER)
    run_relabel(shown, relabel([source], tmp_path / "seen.hcpe3"))
    game = next(iter_hcpe3_games(source))
    board = cshogi.Board()
    board.set_hcp(game.hcp)
    start, moves = board.sfen(), []
    for move16 in game.moves["selectedMove16"].tolist():
        assert (start, moves, board.sfen()) in shown.seen  # the game so far, from the record's start
        moves = [*moves, board.move_from_move16(move16)]
        board.push(moves[-1])


def test_a_stopped_run_continues_to_the_same_file_and_other_settings_are_refused(source, tmp_path):
    second = tmp_path / "src" / "more.hcpe3"
    run_distill(PLAYER, DistillConfig(second, games=2, seed=2, max_moves=20, progress=False))
    whole, resumed = tmp_path / "whole.hcpe3", tmp_path / "resumed.hcpe3"
    assert run_relabel(TEACHER, relabel([source, second], whole)).games == 7
    stop = threading.Event()
    stats = run_relabel(
        TEACHER, relabel([source, second], resumed), stop, on_game=lambda n: stop.set() if n == 3 else None
    )
    assert stats.interrupted and len(list(iter_hcpe3_games(resumed))) == 3
    assert run_relabel(TEACHER, relabel([source, second], resumed)).games == 4
    assert resumed.read_bytes() == whole.read_bytes()
    assert run_relabel(TEACHER, relabel([source, second], resumed)).games == 0  # done: nothing more
    with pytest.raises(UserError, match="other settings"):
        run_relabel(TEACHER, relabel([source, second], resumed, top_k=3))
    with pytest.raises(UserError, match="other settings"):
        run_relabel(TEACHER, relabel([second, source], resumed))  # another order: other games
    run_distill(PLAYER, DistillConfig(second, games=3, seed=2, max_moves=20, progress=False))
    with pytest.raises(UserError, match="other settings"):
        run_relabel(TEACHER, relabel([source, second], resumed))  # a source that changed


def test_an_illegal_move_in_a_source_names_the_file_the_game_and_the_move(source, tmp_path):
    game = list(iter_hcpe3_games(source))[1]
    moves = game.moves.copy()
    moves["selectedMove16"][3] = moves["selectedMove16"][2]  # the same move again: not legal now
    bad = tmp_path / "bad.hcpe3"
    writer = Hcpe3Writer(bad)
    writer.write(next(iter_hcpe3_games(source)))
    writer.write(Hcpe3Game(game.hcp, game.result, game.opponent, moves, game.candidates))
    writer.close()
    for batch in (4, 256):  # the bad game in a batch of its own, or in one with the game before it
        out = tmp_path / f"out{batch}.hcpe3"
        teacher = NetworkTeacher(TorchEvaluator(build(preset("tiny"), seed=4), max_batch=batch))
        with pytest.raises(UserError, match=rf"^{bad}: game 2, move 4: 0x[0-9a-f]{{4}} is not a legal move "):
            run_relabel(teacher, relabel([bad], out))
        assert len(list(iter_hcpe3_games(out))) == 1  # the whole game before it is written
    assert not np.array_equal(moves, game.moves)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "bin" / "distill"), *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_cli_relabels_a_folder_and_rejects_bad_arguments_in_one_line(source, tmp_path):
    out = tmp_path / "out" / "relabelled.hcpe3"
    proc = run_cli(str(out), "--relabel", str(source.parent), "--backend", "torch", "--no-progress")
    assert proc.returncode == 0 and "relabelled.hcpe3: 5 games, " in proc.stderr, proc.stderr
    assert len(list(iter_hcpe3_games(out))) == 5
    text = tmp_path / "text.hcpe3"
    text.write_text("not a record\n" * 10)
    for args, needle in (
        (["--relabel", str(source)], "--relabel needs OUT"),
        ([str(tmp_path / "x.hcpe3"), "--relabel", str(source), "--games", "3"], "takes no --games"),
        ([str(tmp_path / "x.hcpe3"), "--relabel", str(source), "--seed", "3"], "takes no --seed"),
        ([str(source), "--relabel", str(source)], "a source cannot be OUT too"),
        ([str(tmp_path / "x.hcpe3"), "--relabel", str(tmp_path / "none")], "none: no such file or folder"),
        ([str(tmp_path / "x.hcpe3"), "--relabel", str(text)], "text.hcpe3: not an hcpe3 file"),
        ([str(tmp_path / "x.hcpe3"), "--relabel", str(source), "--top-k", "0"], "--top-k must be >= 1"),
    ):
        proc = run_cli(*args)
        assert proc.returncode == 2 and proc.stderr.startswith("distill: error: "), proc.stderr
        assert needle in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert not (tmp_path / "x.hcpe3").exists()
