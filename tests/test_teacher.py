"""miniosl's network as a distillation teacher (train/teachers/miniosl_teacher.py, bin/distill --teacher
miniosl, bin/teacher_usi): its labels against cshogi's, its value's side and scale, whole and reproducible
teacher games, and the USI player. Runs where the optional extra `teacher` is installed (CI installs it)."""

import subprocess
import sys
import threading
from pathlib import Path

import cshogi
import numpy as np
import pytest

pytest.importorskip("miniosl")

import miniosl  # noqa: E402

from engine.core.moves import legal_moves_and_labels  # noqa: E402
from engine.core.position import board_hcp, random_positions  # noqa: E402
from engine.core.score import eval_to_value  # noqa: E402
from engine.play.book import GPSSHOGI_BOOK  # noqa: E402
from engine.records.hcpe3_games import iter_hcpe3_games  # noqa: E402
from train.teachers.distill import DistillConfig, compact_targets, run_distill  # noqa: E402
from train.teachers.distill_openings import GameOpenings, OpeningPlan  # noqa: E402
from train.teachers.miniosl_teacher import MinioslTeacher, miniosl_labels  # noqa: E402
from train.teachers.relabel import RelabelConfig, run_relabel  # noqa: E402
from train.teachers.teacher import GamePosition  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TEACHER = MinioslTeacher(max_batch=8, threads=1)
BOARDS = random_positions(40, seed=11, max_plies=160)  # random games from the start: drops, promotions


def game_of(board: cshogi.Board) -> GamePosition:
    return GamePosition(cshogi.STARTING_SFEN, list(board.history), board)


def declined_promotion(board: cshogi.Board, move: int) -> bool:
    """A legal move miniosl never generates: a pawn, bishop or rook that stays unpromoted where it could
    promote, or a lance that stays unpromoted on the second farthest rank."""
    if cshogi.move_is_drop(move) or cshogi.move_is_promotion(move):
        return False
    piece = cshogi.move_from_piece_type(move)
    if piece in (cshogi.PAWN, cshogi.BISHOP, cshogi.ROOK):
        promoted = (move | 0x4000) & 0xFFFF  # the same move16 with the promotion flag
        return promoted in {m & 0xFFFF for m in board.legal_moves}
    rank = cshogi.move_to(move) % 9
    return piece == cshogi.LANCE and rank == (1 if board.turn == cshogi.BLACK else 7)


def test_every_legal_move_has_its_own_miniosl_label_and_maps_back():
    drops = promotions = declined = 0
    for board in BOARDS:
        if board.is_game_over():
            continue
        state = miniosl.usi_state("sfen " + board.sfen())
        moves, _ = legal_moves_and_labels(board)
        labels, generated = miniosl_labels(state, moves)
        assert len(set(labels.tolist())) == len(moves) and ((0 <= labels) & (labels < 2187)).all()
        for move, label, gen in zip(moves.tolist(), labels.tolist(), generated.tolist(), strict=True):
            assert state.decode_move_label(label).to_usi() == cshogi.move_to_usi(move)
            assert gen != declined_promotion(board, move), cshogi.move_to_usi(move)
        drops += sum(cshogi.move_is_drop(m) for m in moves.tolist())
        promotions += sum(cshogi.move_is_promotion(m) for m in moves.tolist())
        declined += int((~generated).sum())
    assert drops and promotions and declined  # the positions covered every kind


def test_the_policy_is_over_the_legal_moves_only_and_sums_to_one():
    positions = [game_of(b) for b in BOARDS[:8] if not b.is_game_over()]
    for position, judged in zip(positions, TEACHER.judge(positions), strict=True):
        moves, labels = legal_moves_and_labels(position.board)
        assert (judged.moves == moves).all() and (judged.labels == labels).all()
        assert abs(judged.policy.sum() - 1) < 1e-9 and (judged.policy >= 0).all()
        _, generated = miniosl_labels(miniosl.usi_state("sfen " + position.board.sfen()), moves)
        assert (judged.policy[~generated] == 0).all()
        assert 0 <= judged.value <= 1


def test_the_history_reaches_the_network():
    board = BOARDS[0]
    with_history = TEACHER.judge([game_of(board)])[0]
    bare = TEACHER.judge([GamePosition(board.sfen(), [], board)])[0]
    assert np.abs(with_history.policy - bare.policy).max() > 1e-3


@pytest.mark.parametrize(
    ("sfen", "winning"),
    [
        ("4k4/9/4P4/9/9/9/9/9/4K4 b G 1", True),  # Black mates with G*5b
        ("4k4/9/9/9/9/9/4p4/9/4K4 w g 1", True),  # the same for White: G*5h
        ("4k4/9/4P4/9/9/9/9/9/4K4 w G 1", False),  # White to move, Black still far ahead
        ("4k4/9/9/9/9/9/4p4/9/4K4 b g 1", False),
        ("lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w r 1", True),  # White a rook up
        ("lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b r 1", False),
    ],
)
def test_the_value_is_the_side_to_moves_win_probability(sfen, winning):
    value = TEACHER.judge([GamePosition(sfen, [], cshogi.Board(sfen))])[0].value
    assert value > 0.85 if winning else value < 0.3, value


def test_the_start_position_is_about_even():
    assert abs(TEACHER.judge([game_of(cshogi.Board())])[0].value - 0.5) < 0.05


def distill(out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "bin" / "distill"), str(out), "--teacher", "miniosl", "--games", "3"]
    cmd += ["--batch", "2", "--max-moves", "24", "--seed", "4", "--threads", "1", "--no-progress", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_distill_writes_whole_reproducible_games_with_the_teachers_targets(tmp_path):
    first, second = tmp_path / "a.hcpe3", tmp_path / "b.hcpe3"
    for out in (first, second):
        proc = distill(out)
        assert proc.returncode == 0 and "positions written" in proc.stderr, proc.stderr
    assert first.read_bytes() == second.read_bytes()
    games = list(iter_hcpe3_games(first))
    assert len(games) == 3
    board = cshogi.Board()
    for info, cands in zip(games[0].moves, games[0].candidates, strict=True):
        judged = TEACHER.judge([game_of(board)])[0]
        move16s = [int(m) & 0xFFFF for m in judged.moves]
        played = move16s.index(int(info["selectedMove16"]))
        keep, visits = compact_targets(judged.policy, played, 0.99, 16)  # the defaults
        assert cands["move16"].tolist() == [move16s[k] for k in keep]
        assert cands["visitNum"].tolist() == visits.tolist()
        assert abs(eval_to_value(int(info["eval"])) - judged.value) < 2e-3
        board.push(judged.moves[played])
    assert board.move_number - 1 == 24


@pytest.mark.skipif(not GPSSHOGI_BOOK.is_file(), reason="Debian's gpsshogi-data is not installed")
def test_distill_chunks_from_book_and_random_openings_are_remade_alone(tmp_path):
    whole, alone = tmp_path / "whole", tmp_path / "alone"
    args = (
        f"--book-openings {GPSSHOGI_BOOK} --book-plies 8 --random-plies 4 --random-share 0.5 --chunk-games 2"
    )
    args += " --teacher miniosl --max-moves 20 --batch 4 --threads 1 --no-progress"
    for folder, extra in (
        (whole, ["--chunk-count", "2"]),
        (alone, ["--chunk-count", "1", "--first-chunk", "1"]),
    ):
        cmd = [sys.executable, str(REPO / "bin" / "distill"), "--chunks", str(folder), *args.split(), *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "repeat an earlier one" in proc.stderr, proc.stderr
    assert (alone / "chunk-00001.hcpe3").read_bytes() == (whole / "chunk-00001.hcpe3").read_bytes()
    assert not (alone / "chunk-00000.hcpe3").exists()
    game = next(iter_hcpe3_games(whole / "chunk-00000.hcpe3"))  # game 0: a book line of 8 moves
    opening = GameOpenings(OpeningPlan(GPSSHOGI_BOOK, 8, 4, 0.5), seed=0, end=1)[0]
    board = opening.board()
    assert len(opening.moves) == 8 and (game.hcp == board_hcp(board)).all() and len(game.moves) == 20 - 8
    judged = TEACHER.judge([game_of(board)])[0]  # with the opening as its history
    keep, _ = compact_targets(judged.policy, int(np.argmax(judged.policy)), 0.99, 16)
    want = [int(judged.moves[k]) & 0xFFFF for k in keep]
    assert game.candidates[0]["move16"][: len(keep)].tolist() == want


def test_a_stopped_run_continues_to_the_same_file(tmp_path):
    whole, resumed = tmp_path / "whole.hcpe3", tmp_path / "resumed.hcpe3"
    config = DistillConfig(whole, games=4, seed=2, max_moves=16, progress=False)
    teacher = MinioslTeacher(max_batch=2, threads=1)
    run_distill(teacher, config)
    stop = threading.Event()
    config.out = resumed
    run_distill(teacher, config, stop, on_game=lambda done: stop.set() if done == 1 else None)
    assert 1 <= len(list(iter_hcpe3_games(resumed))) < 4
    run_distill(teacher, config)
    assert resumed.read_bytes() == whole.read_bytes()


def test_relabelling_the_teachers_own_games_gives_them_back(tmp_path):
    games, out = tmp_path / "games.hcpe3", tmp_path / "relabelled.hcpe3"
    run_distill(TEACHER, DistillConfig(games, games=2, seed=3, max_moves=20, progress=False))
    stats = run_relabel(TEACHER, RelabelConfig([games], out, progress=False))
    assert stats.games == 2 and stats.positions == 2 * 20
    assert out.read_bytes() == games.read_bytes()  # miniosl's answers depend on the history it is given


def test_a_bad_teacher_file_is_one_error_line(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a network")
    for spec, needle in ((f"miniosl:{bad}", "cannot load it"), ("miniosl:none.onnx", "not found")):
        proc = subprocess.run(
            [sys.executable, str(REPO / "bin" / "distill"), str(tmp_path / "x.hcpe3"), "--games", "1",
             "--teacher", spec],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 2 and proc.stderr.startswith("distill: error:") and needle in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_usi_teacher_answers_with_a_legal_greedy_move():
    script = "\n".join(
        [
            "usi",
            "isready",
            "usinewgame",
            "position startpos moves 7g7f 3c3d",
            "go btime 1000 wtime 1000 byoyomi 1000",
            "position sfen 4k4/9/4P4/9/9/9/9/9/4K4 b G 1",
            "go byoyomi 1000",
            "quit",
            "",
        ]
    )
    proc = subprocess.run(
        [str(REPO / "bin" / "teacher_usi")], input=script, capture_output=True, text=True, timeout=120
    )
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and "usiok" in lines and "readyok" in lines, proc.stdout + proc.stderr
    bestmoves = [line.split()[1] for line in lines if line.startswith("bestmove")]
    board = cshogi.Board()
    board.push_usi("7g7f")
    board.push_usi("3c3d")
    assert len(bestmoves) == 2 and board.is_legal(board.move_from_usi(bestmoves[0]))
    assert bestmoves[1] == "G*5b"  # mate in one: the policy's clear favourite
