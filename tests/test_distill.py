"""Teacher games for distillation (train/teachers/distill.py, bin/distill): every position carries the
teacher's likeliest moves and its value, games start from distinct openings that the teacher sees as
history, the same command always makes the same files, a stopped run continues them, and a chunk made
alone is the chunk of a whole run."""

import subprocess
import sys
import threading
from pathlib import Path

import cshogi
import numpy as np
import pytest

from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.features import fill_features
from engine.core.moves import legal_moves_and_labels
from engine.core.network import build, preset
from engine.core.position import board_hcp
from engine.core.score import eval_to_value
from engine.errors import UserError
from engine.play.book import GPSSHOGI_BOOK
from engine.records.hcpe3_games import iter_hcpe3_games
from engine.selfplay.writer import VISIT_SCALE
from train.teachers.distill import Chunks, DistillConfig, compact_targets, repeats, run_distill
from train.teachers.distill_chunks import SETTINGS, chunk_path
from train.teachers.distill_openings import GameOpenings, OpeningPlan, is_random, random_before
from train.teachers.network_teacher import NetworkTeacher

REPO = Path(__file__).resolve().parent.parent
NET = TorchEvaluator(build(preset("tiny"), seed=3), max_batch=4)
TEACHER = NetworkTeacher(NET)


def test_compact_targets_keep_the_likeliest_moves_covering_the_mass_and_the_move_played():
    policy = np.array([0.04, 0.5, 0.15, 0.3, 0.01])
    keep, visits = compact_targets(policy, played=1, top_mass=0.9, top_k=16)
    assert keep.tolist() == [1, 3, 2]  # 0.5 + 0.3 + 0.15 >= 0.9: the fewest that cover it
    assert visits.tolist() == np.rint(policy[[1, 3, 2]] / 0.95 * VISIT_SCALE).tolist()
    keep, visits = compact_targets(policy, played=4, top_mass=0.9, top_k=2)
    assert keep.tolist() == [1, 3, 4]  # at most 2 by probability, and the move played
    assert visits.tolist() == np.rint(policy[[1, 3, 4]] / 0.81 * VISIT_SCALE).tolist()
    tiny = np.array([1 - 2e-9, 1e-9, 1e-9])
    keep, visits = compact_targets(tiny, played=0, top_mass=1.0, top_k=16)
    assert keep.tolist() == [0] and visits.tolist() == [VISIT_SCALE]  # zero counts are dropped
    keep, visits = compact_targets(tiny, played=2, top_mass=1.0, top_k=16)
    assert keep.tolist() == [0, 2] and visits.tolist() == [VISIT_SCALE, 1]  # ...but never the move played


def test_every_position_carries_the_teachers_likeliest_moves_and_value(tmp_path):
    out = tmp_path / "t.hcpe3"
    config = DistillConfig(out, games=3, seed=5, max_moves=40, top_mass=0.9, top_k=6, progress=False)
    stats = run_distill(TEACHER, config)
    games = list(iter_hcpe3_games(out))
    assert len(games) == 3 and stats.positions == sum(len(g.moves) for g in games)
    assert (
        stats.bytes == out.stat().st_size == 3 * 36 + sum(6 + 4 * len(c) for g in games for c in g.candidates)
    )
    checked = 0
    for game in games:
        board = cshogi.Board()
        board.set_hcp(game.hcp)
        for info, cands in zip(game.moves, game.candidates, strict=True):
            moves, labels = legal_moves_and_labels(board)
            fill_features(board, NET.x1[0], NET.x2[0])
            logits, value = NET.evaluate(1)
            own = logits[0][labels].astype(np.float64)
            policy = np.exp(own - own.max()) / np.exp(own - own.max()).sum()
            move16s = [int(m) & 0xFFFF for m in moves]
            played = move16s.index(int(info["selectedMove16"]))
            keep, visits = compact_targets(policy, played, 0.9, 6)
            assert cands["move16"].tolist() == [move16s[k] for k in keep]
            assert np.abs(cands["visitNum"].astype(int) - visits).max() <= 1
            assert 1 <= len(cands) <= 7 and (cands["visitNum"] > 0).all()
            assert abs(eval_to_value(int(info["eval"])) - float(value[0])) < 2e-3
            board.push(moves[played])
            checked += 1
        assert board.is_game_over() or board.move_number - 1 >= 40 or board.is_draw()
    assert checked == stats.positions


def test_random_games_are_spread_evenly_by_their_share():
    for share in (0.0, 0.25, 1 / 3, 0.5, 1.0):
        flags = [is_random(i, share) for i in range(120)]
        assert sum(flags) == random_before(120, share) == int(120 * share)
        assert all(sum(flags[:n]) == random_before(n, share) for n in range(121))


class Recording:
    """A teacher that remembers what it was shown."""

    def __init__(self, teacher: NetworkTeacher) -> None:
        self.teacher, self.max_batch, self.seen = teacher, teacher.max_batch, []

    def judge(self, positions):
        self.seen += [(p.start_sfen, list(p.moves), p.board.sfen()) for p in positions]
        return self.teacher.judge(positions)

    def close(self) -> None:
        pass


def test_games_start_after_distinct_openings_that_the_teacher_sees_as_history(tmp_path):
    out = tmp_path / "o.hcpe3"
    plan = OpeningPlan(random_plies=3)
    teacher = Recording(TEACHER)
    stats = run_distill(
        teacher, DistillConfig(out, games=4, seed=6, max_moves=12, openings=plan, progress=False)
    )
    openings = GameOpenings(plan, seed=6, end=4)
    games = list(iter_hcpe3_games(out))
    assert len({o.moves for o in (openings[i] for i in range(4))}) == 4  # distinct
    for i, game in enumerate(games):
        board = openings[i].board()
        assert (game.hcp == board_hcp(board)).all() and len(game.moves) == 12 - 3  # written after it
        assert (cshogi.STARTING_SFEN, list(board.history), board.sfen()) in teacher.seen
    assert stats.repeats == 0 and stats.games == 4
    from_start = run_distill(
        TEACHER, DistillConfig(tmp_path / "s.hcpe3", games=3, max_moves=8, progress=False)
    )
    assert from_start.repeats >= 2  # every game from the start position writes it


def test_repeats_count_positions_seen_before():
    a, b = (
        board_hcp(cshogi.Board()),
        board_hcp(cshogi.Board("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1")),
    )
    seen: set[bytes] = set()
    assert repeats([a, b, a], seen) == 1 and repeats([b], seen) == 1 and len(seen) == 2  # the side counts


@pytest.mark.skipif(not GPSSHOGI_BOOK.is_file(), reason="Debian's gpsshogi-data is not installed")
def test_book_and_random_openings_share_the_games():
    plan = OpeningPlan(GPSSHOGI_BOOK, book_plies=8, random_plies=2, random_share=0.5)
    openings = GameOpenings(plan, seed=1, end=8)
    assert [len(openings[i].moves) for i in range(8)] == [8, 2] * 4
    assert GameOpenings(plan, seed=1, end=3)[2] == openings[2]  # decided by (seed, i) alone
    with pytest.raises(UserError, match="only 30 distinct openings"):
        GameOpenings(OpeningPlan(random_plies=1), seed=1, end=31)


def chunked(folder: Path, first: int = 0, count: int = 3, **extra) -> DistillConfig:
    plan = OpeningPlan(random_plies=4)
    return DistillConfig(folder, seed=9, max_moves=20, openings=plan, chunks=Chunks(2, count, first),
                         teacher="tiny", progress=False, **extra)  # fmt: skip


def test_a_chunk_made_alone_or_resumed_is_the_chunk_of_a_whole_run(tmp_path):
    whole, alone, resumed = tmp_path / "whole", tmp_path / "alone", tmp_path / "resumed"
    stats = run_distill(TEACHER, chunked(whole))
    assert (
        stats.games == 6 and [len(list(iter_hcpe3_games(chunk_path(whole, k)))) for k in range(3)] == [2] * 3
    )
    run_distill(TEACHER, chunked(alone, first=2, count=1))
    assert not chunk_path(alone, 0).exists()
    assert chunk_path(alone, 2).read_bytes() == chunk_path(whole, 2).read_bytes()
    stop = threading.Event()
    run_distill(TEACHER, chunked(resumed), stop, on_game=lambda done: stop.set() if done == 3 else None)
    assert len(list(iter_hcpe3_games(chunk_path(resumed, 1)))) == 1  # stopped mid-chunk
    assert run_distill(TEACHER, chunked(resumed)).games == 3
    for k in range(3):
        assert chunk_path(resumed, k).read_bytes() == chunk_path(whole, k).read_bytes()
    assert run_distill(TEACHER, chunked(whole)).games == 0  # finished chunks are skipped
    with pytest.raises(UserError, match="other settings"):
        run_distill(TEACHER, chunked(whole, temperature=0.5))
    assert (whole / SETTINGS).is_file() and len(list(whole.iterdir())) == 4


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


def test_cli_rejects_bad_arguments_in_one_line_and_leaves_nothing(tmp_path):
    chunks = ["--chunks", str(tmp_path / "c"), "--chunk-games", "2", "--chunk-count", "1"]
    for args, needle in (
        ([str(tmp_path / "x.hcpe3"), "--games", "0"], "--games must be >= 1"),
        ([str(tmp_path / "x.hcpe3"), "--games", "2", "--temperature", "0"], "--temperature must be > 0"),
        ([str(tmp_path), "--games", "1"], "not a file"),
        ([str(tmp_path / "x.hcpe3"), "--games", "2", "--chunk-count", "2"], "OUT needs --games;"),
        (chunks[:4], "--chunks needs --chunk-games and --chunk-count"),
        ([*chunks, "--book-openings", str(tmp_path / "none.dat")], "none.dat: no such file"),
        ([*chunks, "--random-share", "0.5", "--random-plies", "2"], "--random-share needs both"),
        ([*chunks, "--top-mass", "0"], "--top-mass must be in (0, 1]"),
        ([*chunks, "--random-plies", "8", "--max-moves", "8"], "--max-moves must exceed"),
    ):
        proc = subprocess.run([sys.executable, str(REPO / "bin" / "distill"), *args],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 2 and proc.stderr.startswith("distill: error: "), proc.stderr
        assert needle in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert sorted(tmp_path.iterdir()) == [], args  # nothing made
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / SETTINGS).write_text('{"seed": 3}')
    proc = subprocess.run([sys.executable, str(REPO / "bin" / "distill"), *chunks],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "holds chunks made with other settings" in proc.stderr, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and sorted((tmp_path / "c").iterdir()) == [
        tmp_path / "c" / SETTINGS
    ]


def test_miniosl_without_the_extra_is_one_error_line_naming_it(tmp_path):
    hide = (  # bin/distill in a Python where the optional extra `teacher` (miniosl) is not installed
        "import importlib.util as u, runpy, sys; find = u.find_spec; "
        "u.find_spec = lambda name, *a: None if name == 'miniosl' else find(name, *a); "
        f"sys.argv = ['distill', {str(tmp_path / 'x.hcpe3')!r}, '--games', '1', '--teacher', 'miniosl']; "
        f"runpy.run_path({str(REPO / 'bin' / 'distill')!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "distill: error: --teacher miniosl needs the optional extra 'teacher': pip install -e '.[teacher]'"
    ]
