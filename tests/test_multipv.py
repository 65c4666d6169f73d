"""MultiPV: the engine's k best root moves, by visits, each with a legal PV; `multipv 1` is the bestmove.

Through the project's USI client (engine.analysis.engine.AnalysisEngine, a UsiProcess) against the real
bin/usi_engine in PUCT and Gumbel modes, `go nodes` and `go infinite`; and on the trees themselves,
where the visits the lines are ordered by can be read. MultiPV 1 prints what it always printed.
"""

from __future__ import annotations

import time

import cshogi
import numpy as np
import pytest

from engine.analysis.engine import AnalysisEngine, Thought, engine_spec, parse_info
from engine.backends.torch_evaluator import TorchEvaluator
from engine.core.network import build, preset
from engine.play.answers import format_info, info_lines
from engine.search.control import SearchControl
from engine.search.multipv import root_lines
from engine.search.puct import PuctParams, Search
from engine.search.puct_tree import FastSearch

MIDDLE_GAME = "ln3g1nl/1g4sk1/p1p1Pp1pp/1p2p4/3ps4/+B1P6/PPSP1PPPP/3KG4/LN3GSNL b Rrbp 51"
KINGS_ONLY = "4k4/9/9/9/9/9/9/9/4K4 b - 1"  # Black's king has 5 moves
OPENING = ["7g7f", "3c3d"]
FAST = {"Backend": "torch", "DNN_Batch_Size": "4", "UCT_Threads": "1", "PV_Interval": "50"}


def legal_line(sfen: str, moves: list[str], pv: list[str]) -> bool:
    board = cshogi.Board(sfen)
    for m in [*moves, *pv]:
        move = board.move_from_usi(m)
        if not move or move not in set(board.legal_moves):
            return False
        board.push(move)
    return True


@pytest.fixture(scope="module")
def engine(tiny_model):
    e = AnalysisEngine(engine_spec(tiny_model, 3, FAST), timeout=120)
    e.connect()
    yield e
    e.close()


def check_lines(t: Thought, sfen: str, moves: list[str], count: int) -> None:
    assert len(t.candidates) == count
    first = [c.move for c in t.candidates]
    assert len(set(first)) == count  # distinct root moves
    assert first[0] == t.bestmove
    for c in t.candidates:
        assert c.pv[0] == c.move and legal_line(sfen, moves, c.pv), c


@pytest.mark.parametrize("mode", ["puct", "gumbel"])
def test_three_lines_are_distinct_legal_root_moves_and_the_first_is_the_bestmove(engine, mode):
    engine.setoption("Search_Mode", mode)
    engine.setoption("MultiPV", 3)
    try:
        t = engine.think(cshogi.STARTING_SFEN, OPENING, "go nodes 64", 60)
    finally:
        engine.setoption("Search_Mode", "puct")
    check_lines(t, cshogi.STARTING_SFEN, OPENING, 3)


@pytest.mark.parametrize("mode", ["puct", "gumbel"])
def test_more_lines_asked_than_legal_moves_gives_one_a_move(engine, mode):
    engine.setoption("Search_Mode", mode)
    engine.setoption("MultiPV", 10)
    try:
        t = engine.think(KINGS_ONLY, [], "go nodes 32", 60)
    finally:
        engine.setoption("Search_Mode", "puct")
        engine.setoption("MultiPV", 3)
    check_lines(t, KINGS_ONLY, [], 5)


def read_until_bestmove(engine: AnalysisEngine) -> list[str]:
    lines = []
    while not (line := engine._read(30.0)).startswith("bestmove"):
        lines.append(line)
    return [*lines, line]


def test_go_infinite_reports_every_line_at_each_interval_and_before_bestmove(engine):
    engine.setoption("MultiPV", 3)
    engine.position(OPENING)
    engine._send("go infinite")
    time.sleep(1.0)
    engine._send("stop")
    lines = read_until_bestmove(engine)
    reports = [w for line in lines if (w := line.split())[:2] == ["info", "multipv"]]
    indices = [int(w[2]) for w in reports]
    assert indices.count(1) >= 2 and indices[-3:] == [1, 2, 3]  # periodic reports, then the final one
    assert reports[-3][reports[-3].index("pv") + 1] == lines[-1].split()[1]


def test_multipv_1_output_has_no_multipv_field(engine):
    engine.setoption("MultiPV", 1)
    try:
        engine.position(OPENING)
        engine._send("go nodes 64")
        lines = read_until_bestmove(engine)
    finally:
        engine.setoption("MultiPV", 3)
    infos = [line for line in lines if line.startswith("info depth")]
    assert infos and not any("multipv" in line for line in lines)
    last = infos[-1].split()
    assert last[last.index("pv") + 1] == lines[-1].split()[1]


# ----- on the trees: the order is by visits -----


@pytest.fixture(scope="module")
def evaluator():
    return TorchEvaluator(build(preset("tiny"), seed=0), max_batch=8)


@pytest.mark.parametrize("search_type", [Search, FastSearch])
def test_puct_lines_follow_the_root_visits(evaluator, search_type):
    s = search_type(evaluator, PuctParams(multipv=6), batch_size=8)
    s.set_position(MIDDLE_GAME, [])
    r = s.run(SearchControl(max_playouts=300))
    lines = root_lines(s, r, 6)
    root = s.root
    visits = {int(m): int(n) for m, n in zip(root.moves, root.child_n, strict=True)}
    assert [line.move for line in lines][0] == r.bestmove and len({line.move for line in lines}) == 6
    counts = [visits[line.move] for line in lines]
    assert counts == sorted(counts, reverse=True) and counts[0] == max(visits.values())
    assert sorted(visits.values(), reverse=True)[:6] == counts  # the k most visited moves
    for line in lines:
        board = cshogi.Board(MIDDLE_GAME)
        for m in line.pv:
            assert m in set(board.legal_moves)
            board.push(m)


def test_gumbel_lines_follow_the_root_visits(evaluator):
    s = Search(evaluator, PuctParams(mode="gumbel", multipv=4, gumbel_considered=8), batch_size=8)
    s.set_position(MIDDLE_GAME, [])
    r = s.run(SearchControl(max_playouts=48), rng=np.random.default_rng(0))
    g = s.gumbel_result
    lines = root_lines(s, r, 4)
    visits = {int(m): int(n) for m, n in zip(g.moves, g.visits, strict=True)}
    assert lines[0].move == r.bestmove == g.moves[g.choice]
    counts = [visits[line.move] for line in lines]
    assert counts == sorted(counts, reverse=True) and counts[0] == max(visits.values())
    assert all(len(line.pv) > 1 for line in lines[1:] if visits[line.move] > 1)  # replies under each


@pytest.mark.parametrize("mode", ["puct", "gumbel"])
def test_line_1_is_the_single_line_with_its_index(evaluator, mode):
    s = FastSearch(evaluator, PuctParams(mode=mode, multipv=3), batch_size=8)
    s.set_position(cshogi.STARTING_SFEN, [])
    r = s.run(SearchControl(max_playouts=64), rng=np.random.default_rng(0))
    single = format_info(r, 1000)
    assert info_lines(s, r, 1000, 1) == [single]
    lines = info_lines(s, r, 1000, 3)
    assert len(lines) == 3 and lines[0] == single.replace("info ", "info multipv 1 ", 1)
    assert [parse_info(line.split())[0] for line in lines] == [1, 2, 3]
