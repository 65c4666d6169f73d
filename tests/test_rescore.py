"""bin/rescore: positions of hcpe/hcpe3 files -> hcpe rows of a USI engine's move and score, resumable,
whole rows after a stop, engine crashes survived."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import cshogi
import numpy as np
import pytest

from engine.core.score import value_to_eval
from engine.errors import UserError
from engine.records.formats import HCPE, MOVE_INFO, MOVE_VISITS, Hcpe3Game
from engine.records.writers import write_hcpe, write_hcpe3_games
from engine.usi_client import EngineSpec, GoLimit, usi_score_to_value
from tests.test_corpus import SCORED_ENGINE
from train.data.readers import read_hcpe
from train.teachers.rescore import RescoreConfig, distinct_positions, run_rescore, score_row

REPO = Path(__file__).resolve().parent.parent
HELDOUT = REPO / "models" / "heldout" / "fsf-200k.hcpe"
pytestmark = pytest.mark.timeout(300)


def engine_file(tmp_path: Path, *args: str) -> str:
    path = tmp_path / "scored_engine.py"
    path.write_text(f"#!{sys.executable}\n{SCORED_ENGINE}")
    path.chmod(0o755)
    return " ".join([str(path), "0", *args])


def hcp_after(moves: list[str]) -> np.ndarray:
    board = cshogi.Board()
    for m in moves:
        board.push_usi(m)
    hcp = np.empty(32, np.uint8)
    board.to_hcp(hcp)
    return hcp


def config(tmp_path: Path, inputs: list[Path], engine: str, **kwargs) -> RescoreConfig:
    base = {"parallel": 2, "timeout": 20.0, "progress": False}
    return RescoreConfig(
        inputs, tmp_path / "out.hcpe", EngineSpec(engine), GoLimit(nodes=7), **{**base, **kwargs}
    )


def check_rows(out: Path, source: Path) -> np.ndarray:
    """Each row: a legal move at a position of the source, the engine's score (cp 7) as eval, and the
    source's result for that position."""
    rows = np.asarray(read_hcpe(out))
    results = {bytes(r["hcp"]): r["gameResult"] for r in np.fromfile(source, HCPE)}
    board = cshogi.Board()
    for row in rows:
        board.set_hcp(row["hcp"])
        assert board.is_legal(board.move_from_move16(int(row["bestMove16"])))
        assert row["eval"] == value_to_eval(usi_score_to_value("cp 7"))
        assert row["gameResult"] == results[bytes(row["hcp"])]
    assert len({bytes(h) for h in rows["hcp"]}) == len(rows)
    return rows


def test_distinct_positions_of_hcpe_and_hcpe3_in_order_or_shuffled(tmp_path):
    moves = np.zeros(3, MOVE_INFO)
    board = cshogi.Board()
    for i, usi in enumerate(["7g7f", "3c3d", "2g2f"]):
        moves[i]["selectedMove16"] = cshogi.move16(board.move_from_usi(usi))
        board.push_usi(usi)
    cands = [np.zeros(1, MOVE_VISITS) for _ in range(3)]
    game = Hcpe3Game(hcp_after([]), result=1 | 8, opponent=0, moves=moves, candidates=cands)
    write_hcpe3_games(tmp_path / "a.hcpe3", [game])
    rows = np.zeros(3, HCPE)
    rows["hcp"] = [hcp_after(["7g7f"]), hcp_after(["2g2f"]), hcp_after(["2g2f"])]  # one known, one twice
    rows["gameResult"] = 2
    write_hcpe(tmp_path / "b.hcpe", rows)

    hcps, results = distinct_positions([tmp_path / "a.hcpe3", tmp_path / "b.hcpe"])
    expected = [hcp_after([]), hcp_after(["7g7f"]), hcp_after(["7g7f", "3c3d"]), hcp_after(["2g2f"])]
    assert [bytes(h) for h in hcps] == [bytes(h) for h in expected]
    assert list(results) == [1, 1, 1, 2]  # the result without the reason bits

    shuffled, _ = distinct_positions([HELDOUT], shuffle=5)
    plain, _ = distinct_positions([HELDOUT])
    again, _ = distinct_positions([HELDOUT], shuffle=5)
    assert sorted(map(bytes, shuffled)) == sorted(map(bytes, plain)) and len(plain) == 1842
    assert [bytes(h) for h in shuffled] == [bytes(h) for h in again] != [bytes(h) for h in plain]


def test_score_row_refuses_what_is_not_a_legal_move():
    hcp = hcp_after([])
    row = score_row(hcp, 1, "7g7f", "cp 120")
    assert row is not None and row["eval"][0] == value_to_eval(usi_score_to_value("cp 120"))
    assert row["gameResult"][0] == 1 and bytes(row["hcp"][0]) == bytes(hcp)
    for answer in ("resign", "win", "7g7e", "zz"):
        assert score_row(hcp, 1, answer, "cp 0") is None


def test_rescore_resumes_where_it_stopped_and_cuts_a_partial_row(tmp_path):
    engine = engine_file(tmp_path)
    first = run_rescore(config(tmp_path, [HELDOUT], engine, positions=100, shuffle=3))
    assert (first.done, first.rows, first.scored, first.interrupted) == (100, 100, 100, False)
    out = tmp_path / "out.hcpe"
    with open(out, "ab") as f:
        f.write(b"\x01" * 20)  # a row cut short by a kill
    second = run_rescore(config(tmp_path, [HELDOUT], engine, positions=250, shuffle=3))
    assert (second.done, second.rows, second.scored) == (250, 250, 150)
    rows = check_rows(out, HELDOUT)
    order, _ = distinct_positions([HELDOUT], shuffle=3)
    assert [bytes(h) for h in rows["hcp"]] == [bytes(h) for h in order[:250]]
    progress = json.loads((tmp_path / "out.hcpe.json").read_text())
    assert (progress["done"], progress["rows"], progress["settings"]["shuffle"]) == (250, 250, 3)

    with pytest.raises(UserError, match="other inputs, engine or limit"):
        run_rescore(config(tmp_path, [HELDOUT], engine, positions=300, shuffle=4))
    (tmp_path / "out.hcpe.json").unlink()
    with pytest.raises(UserError, match="exists without out.hcpe.json"):
        run_rescore(config(tmp_path, [HELDOUT], engine))


def test_a_mated_position_is_skipped_and_a_crashing_engine_restarted(tmp_path):
    mated = cshogi.Board("8k/8G/7S1/9/9/9/9/9/K8 w 2r2b3g3s4n4l18p 1")
    assert mated.is_game_over()  # the random mover answers `resign`
    rows = np.zeros(13, HCPE)
    opening = ["7g7f", "3c3d", "2g2f", "8c8d", "2f2e", "8d8e", "6i7h", "4a3b", "2e2d", "2c2d", "2h2d"]
    for i in range(11):
        rows[i + (i > 0)]["hcp"] = hcp_after(opening[:i])
    mated.to_hcp(rows[1]["hcp"])
    rows[12]["hcp"] = hcp_after([])  # a duplicate: dropped before scoring
    rows["gameResult"] = 1
    source = tmp_path / "in.hcpe"
    write_hcpe(source, rows)
    stats = run_rescore(config(tmp_path, [source], engine_file(tmp_path, "crash", "4"), parallel=1))
    # each start of the engine crashes at its 4th position: the 4th, 8th and 12th fail, the rest go on
    assert (stats.done, stats.failed, stats.skipped) == (12, 3, 1)
    assert stats.rows == stats.scored == 8
    rows_out = check_rows(tmp_path / "out.hcpe", source)
    assert [bytes(h) for h in rows_out["hcp"]] == [bytes(rows[i]["hcp"]) for i in (0, 2, 4, 5, 6, 8, 9, 10)]


def test_a_stop_leaves_whole_rows_and_the_rerun_finishes(tmp_path):
    engine = engine_file(tmp_path, "slow", "0.05")
    stop = threading.Event()
    timer = threading.Timer(1.0, stop.set)
    timer.start()
    try:
        stats = run_rescore(config(tmp_path, [HELDOUT], engine, positions=200), stop=stop)
    finally:
        timer.cancel()
    assert stats.interrupted and 0 < stats.done < 200
    out = tmp_path / "out.hcpe"
    assert out.stat().st_size == stats.rows * HCPE.itemsize
    rest = run_rescore(config(tmp_path, [HELDOUT], engine, positions=200))
    assert (rest.done, rest.rows, rest.interrupted) == (200, 200, False)
    check_rows(out, HELDOUT)


def test_cli_errors_are_one_line(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        cmd = [str(REPO / "bin" / "rescore"), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)

    bad = tmp_path / "notes.txt"
    bad.write_text("not a record\n")
    for args, message in (
        ([str(bad), "--out", "o.hcpe", "--engine", "x", "--nodes", "5"], "notes.txt"),
        ([str(HELDOUT), "--out", "o.hcpe", "--engine", "x"], "give a search limit"),
        (
            [str(HELDOUT), "--out", "o.hcpe", "--engine", "/nonexistent/engine", "--nodes", "5"],
            "cannot start",
        ),
        ([str(HELDOUT), "--out", "o.hcpe", "--engine", "x", "--nodes", "5", "--option", "Foo"], "--option"),
    ):
        r = run(*args)
        assert r.returncode == 2, r.stderr
        lines = [line for line in r.stderr.strip().splitlines() if "pos/s]" not in line]  # not the bar
        assert len(lines) == 1 and lines[0].startswith("rescore: error:") and message in lines[0], r.stderr
