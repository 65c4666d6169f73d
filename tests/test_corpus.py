"""bin/corpus: engine games -> deduplicated hcpe/hcpe3 rows (position, move, mover's score, result),
resumable, crash/timeout-safe, whole records after SIGINT."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import cshogi
import numpy as np
import pytest

from engine.core.rules import BLACK_WIN, DRAW, WHITE_WIN
from engine.core.score import value_to_eval
from engine.errors import UserError
from engine.match.arbiter import Game
from engine.match.openings import Opening
from engine.usi_client import EngineSpec, GoLimit, usi_score_to_value
from tests.test_osl_book import small_book
from tests.usi_helpers import RANDOM_ENGINE
from train.data.readers import iter_hcpe3_positions, read_hcpe
from train.teachers.corpus import LOG, game_record, hcpe_rows, new_runs, run_corpus
from train.teachers.corpus_config import CorpusConfig, Teacher
from train.teachers.corpus_split import split_corpus

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(300)

# The random mover, reporting `score cp L` where L is the number it was given in `go nodes/depth L`, so a
# row's eval names the teacher that chose its move. Optional argv[2:]: "crash K" exits at its K-th go,
# "hang K" stops answering there, "slow S" sleeps S seconds per move.
SCORED_ENGINE = RANDOM_ENGINE.replace(
    "import sys\n",
    "import sys\nimport time\n\nmode = sys.argv[2:4]\ngoes = 0\n",
    1,
).replace(
    '    elif t[0] == "go":\n',
    '    elif t[0] == "go":\n'
    "        goes += 1\n"
    '        if mode[:1] == ["crash"] and goes == int(mode[1]):\n'
    "            sys.exit(3)\n"
    '        if mode[:1] == ["hang"] and goes == int(mode[1]):\n'
    "            time.sleep(3600)\n"
    '        if mode[:1] == ["slow"]:\n'
    "            time.sleep(float(mode[1]))\n"
    '        print(f"info depth 1 score cp {t[-1]}", flush=True)\n',
    1,
)


@pytest.fixture
def scored(tmp_path: Path) -> Path:
    path = tmp_path / "scored_engine.py"
    path.write_text(f"#!{sys.executable}\n{SCORED_ENGINE}")
    path.chmod(0o755)
    return path


def config(out: Path, engine: str, games: int, **kwargs) -> CorpusConfig:
    teachers = (
        Teacher(EngineSpec(engine, name="n7"), GoLimit(nodes=7)),
        Teacher(EngineSpec(engine, name="d3"), GoLimit(depth=3)),
    )
    base = {"parallel": 2, "max_moves": 60, "timeout": 20.0, "formats": ("hcpe", "hcpe3"), "progress": False}
    return CorpusConfig(out, teachers, games, **{**base, **kwargs})


def log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / LOG).read_text().splitlines()]


def check_corpus(out: Path) -> np.ndarray:
    """Every row: a legal move at its position, the mover's teacher's score as eval, a result; hcpe3
    replays exactly the hcpe rows; no position twice. Returns the hcpe rows."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a partial record would warn
        rows = np.asarray(read_hcpe(out / "corpus.hcpe"))
        positions = list(iter_hcpe3_positions(out / "corpus.hcpe3"))
    assert len(rows) == len(positions) > 0
    assert len({r.tobytes() for r in rows["hcp"]}) == len(rows)
    board = cshogi.Board()
    for row, pos in zip(rows, positions, strict=True):
        board.set_hcp(row["hcp"])
        move = board.move_from_move16(int(row["bestMove16"]))
        assert board.is_legal(move)
        assert row["eval"] in (7, 3)
        assert row["gameResult"] in (0, 1, 2)
        assert (pos.hcp.tobytes(), pos.move16, pos.eval, pos.result & 3) == (
            row["hcp"].tobytes(),
            row["bestMove16"],
            row["eval"],
            row["gameResult"],
        )
        assert [(c["move16"], c["visitNum"]) for c in pos.candidates] == [(row["bestMove16"], 65535)]
    return rows


def test_rows_replay_the_game_and_drop_known_positions():
    opening = Opening(moves=("7g7f", "3c3d"))
    moves = ["2g2f", "8c8d", "2f2e", "8d8e"]
    game = Game(opening, black=0, moves=moves, scores=["cp 40", "mate -3", None, "cp -1000000"])
    game.winner, game.reason = cshogi.WHITE, "resign"
    record = game_record(game)
    board = opening.board()
    for hcp, move16, usi in zip(record.hcps, record.move16s, game.moves, strict=True):
        expected = np.empty(32, np.uint8)
        board.to_hcp(expected)
        assert hcp.tobytes() == expected.tobytes()
        move = board.move_from_usi(usi)
        assert move16 == cshogi.move16(move)
        board.push(move)
    assert record.values == [usi_score_to_value(s) for s in game.scores]
    assert record.result == 2  # White won, no reason bits

    seen = {record.hcps[1].tobytes()}  # the middle position is already in the corpus
    runs = new_runs(record, seen)
    assert [len(r) for r in runs] == [1, 2]
    assert runs[1].start_hcp.tobytes() == record.hcps[2].tobytes()
    assert len(seen) == 4
    rows = hcpe_rows(runs)
    # no score: eval 0; gpsshogi's mate as cp -1000000: a certain loss
    assert list(rows["eval"]) == [40, 0, value_to_eval(0.0)]
    assert list(rows["gameResult"]) == [2, 2, 2]
    assert new_runs(record, seen) == []  # a replayed game adds nothing


def test_corpus_of_engine_games_with_per_side_limits(scored, tmp_path):
    out = tmp_path / "c"
    stats = run_corpus(config(out, str(scored), 4))
    assert stats.games == stats.total_games == 4 and not stats.interrupted
    rows = check_corpus(out)
    assert set(rows["eval"]) == {7, 3}  # both teachers' moves, each with its own limit
    entries = log(out)
    assert sorted(e["game"] for e in entries) == [0, 1, 2, 3]
    assert sum(e["positions"] for e in entries) == len(rows) == stats.positions
    for e in entries:  # teacher 0 (nodes 7) is Black in even games
        assert (e["black"], e["white"]) == (("n7", "d3") if e["game"] % 2 == 0 else ("d3", "n7"))
    json_settings = json.loads((out / "corpus.json").read_text())
    assert [t.get("nodes") for t in json_settings["teachers"]] == [7, None]


def test_split_by_games_puts_the_last_games_in_the_test_set(scored, tmp_path):
    out = tmp_path / "c"
    run_corpus(config(out, str(scored), 4))
    rows = check_corpus(out)
    with open(out / "corpus.hcpe", "ab") as f:  # a game being appended while the split reads
        f.write(rows[:3].tobytes())
    counts = split_corpus(out, 1, tmp_path / "split")
    train, test = read_hcpe(tmp_path / "split" / "train.hcpe"), read_hcpe(tmp_path / "split" / "test.hcpe")
    last = log(out)[-1]
    assert (counts["test games"], counts["test positions"], len(test)) == (1, last["positions"], len(test))
    assert np.array_equal(np.concatenate([train, test]), rows)  # the appended rows are left out
    result = {"b": BLACK_WIN, "w": WHITE_WIN, "d": DRAW}[last["result"]]
    assert set(test["gameResult"]) == {result}  # all rows of the last game logged
    r = subprocess.run(
        [
            sys.executable,
            REPO / "bin" / "convert",
            "split-corpus",
            out,
            "--test-games",
            "4",
            "-o",
            tmp_path / "x",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        r.returncode == 2
        and r.stderr.strip() == f"convert: error: {out}: --test-games must be 1..3 (it has 4 games)"
    )
    with open(out / LOG, "a") as f:
        f.write("{not json\n")
    with pytest.raises(UserError, match=f"{LOG}:5: not a JSON line"):
        split_corpus(out, 1, tmp_path / "split")


def test_rerun_continues_and_refuses_other_settings(scored, tmp_path):
    out = tmp_path / "c"
    run_corpus(config(out, str(scored), 2))
    first = len(read_hcpe(out / "corpus.hcpe"))
    stats = run_corpus(config(out, str(scored), 5))
    assert stats.games == 3 and stats.total_games == 5
    assert sorted(e["game"] for e in log(out)) == [0, 1, 2, 3, 4]
    rows = check_corpus(out)
    assert len(rows) == first + stats.positions
    assert run_corpus(config(out, str(scored), 5)).games == 0  # already complete: nothing to play
    with pytest.raises(UserError, match="other settings"):
        run_corpus(config(out, str(scored), 6, seed=1))


def test_openings_from_a_book_are_its_distinct_lines(scored, tmp_path):
    small_book(tmp_path / "b.dat")  # three lines of 2 moves: 7g7f 3c3d, 7g7f 8c8d, 2g2f 3c3d
    out = tmp_path / "c"
    run_corpus(config(out, str(scored), 3, book=tmp_path / "b.dat", book_plies=2))
    rows = check_corpus(out)
    starts = set()
    for line in (["7g7f", "3c3d"], ["7g7f", "8c8d"], ["2g2f", "3c3d"]):
        board = Opening(moves=tuple(line)).board()
        starts.add(board.zobrist_hash())
    seen = set()
    board = cshogi.Board()
    for hcp in rows["hcp"]:
        board.set_hcp(hcp)
        seen.add(board.zobrist_hash())
    assert starts <= seen  # every line's end was played from, and no opening move was recorded
    assert all(e["plies"] > 2 for e in log(out))
    assert json.loads((out / "corpus.json").read_text())["book_plies"] == 2
    with pytest.raises(UserError, match="other settings"):
        run_corpus(config(out, str(scored), 3, book=tmp_path / "b.dat", book_plies=1))
    with pytest.raises(UserError, match=r"only 3 distinct openings of 2 plies in .*b\.dat"):
        run_corpus(config(tmp_path / "d", str(scored), 4, book=tmp_path / "b.dat", book_plies=2))
    with pytest.raises(UserError, match="no line of the book is 3 moves long"):
        run_corpus(config(tmp_path / "e", str(scored), 1, book=tmp_path / "b.dat", book_plies=3))
    assert not (tmp_path / "e").exists()  # a bad book leaves no output folder behind


@pytest.mark.parametrize("mode", ["crash", "hang"])
def test_failed_games_are_dropped_and_engines_restarted(scored, tmp_path, mode):
    out = tmp_path / "c"
    # Fails at its 40th move: 4 kept games of 60 plies need about 60 moves from each of the 4 processes,
    # so at least one process gets there (in its second game), whatever the scheduling.
    engine = f"{scored} 0 {mode} 40"
    stats = run_corpus(config(out, engine, 4, timeout=2.0))
    assert stats.games == 4
    reasons = [e["reason"] for e in log(out)]
    expected = "crash" if mode == "crash" else "timeout"
    assert expected in reasons and stats.dropped == reasons.count(expected) >= 1
    assert all(e["positions"] == 0 for e in log(out) if e["reason"] == expected)
    check_corpus(out)


def test_engines_that_always_fail_end_the_run(scored, tmp_path):
    with pytest.raises(UserError, match="games in a row dropped"):
        run_corpus(config(tmp_path / "c", f"{scored} 0 crash 1", 4))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "corpus: error: engine 1: give a search limit (--nodes, --depth or --byoyomi)"),
        (["--nodes", "5", "--format", "csa"], "corpus: error: --format: choose from hcpe, hcpe3, got csa"),
        (["--nodes", "5", "--option1", "Th"], "corpus: error: --option1 'Th': expected NAME=VALUE"),
        (["--nodes", "5", "--engine2", "/nonexistent/engine"], "corpus: error: engine '/nonexistent/engine'"),
        (["--nodes", "5", "--depth2", "-1"], "corpus: error: engine 2: --depth2 must be positive, got -1"),
        (
            ["--nodes", "5", "--book-openings", "/nonexistent/b.dat"],
            "corpus: error: /nonexistent/b.dat: no such file",
        ),
        (
            ["--nodes", "5", "--book-openings", "b.dat", "--book-plies", "0"],
            "corpus: error: --book-plies must be >= 1",
        ),
    ],
)
def test_bad_settings_are_one_line_errors(tmp_path, extra, message):
    argv = [sys.executable, str(REPO / "bin" / "corpus"), str(tmp_path / "c"), "--engine1", "bin/greedy_usi"]
    out = subprocess.run(
        [*argv, "--games", "2", *extra], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_sigint_leaves_whole_records_and_a_rerun_finishes(scored, tmp_path):
    out = tmp_path / "c"
    argv = [str(REPO / "bin" / "corpus"), str(out), "--engine1", f"{scored} 0 slow 0.02", "--nodes", "7"]
    argv += [
        "--depth2",
        "3",
        "--games",
        "6",
        "--parallel",
        "2",
        "--max-moves",
        "60",
        "--format",
        "hcpe,hcpe3",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not ((out / LOG).exists() and (out / LOG).read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "(interrupted)" in stdout
    done = log(out)
    assert 1 <= len(done) < 6
    check_corpus(out)
    rerun = subprocess.run([*argv, "--no-progress"], capture_output=True, text=True, timeout=240)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(e["game"] for e in log(out)) == list(range(6))
    check_corpus(out)


FSF = shutil.which("fairy-stockfish") or (
    "/usr/games/fairy-stockfish" if os.path.exists("/usr/games/fairy-stockfish") else None
)


@pytest.mark.skipif(FSF is None, reason="Fairy-Stockfish not installed (Debian package fairy-stockfish)")
def test_fairy_stockfish_scores_become_evals(tmp_path):
    out = tmp_path / "c"
    teacher = Teacher(EngineSpec(FSF, {"Threads": "1", "Hash": "16"}), GoLimit(nodes=500))
    run_corpus(CorpusConfig(out, (teacher, teacher), 2, parallel=2, max_moves=80, progress=False))
    rows = np.asarray(read_hcpe(out / "corpus.hcpe"))
    assert len(rows) > 20 and np.count_nonzero(rows["eval"]) > len(rows) // 2
    assert {e["reason"] for e in log(out)} <= {"checkmate", "resign", "max moves", "sennichite", "nyugyoku"}
