"""The df-pn child process: proofs, deadlines, stop, and recovery after a kill."""

import threading
import time

import cshogi
import pytest

from engine.search.mate import MateSearcher, leaf_mate_value, mated_in_two
from tests.test_usi import MATE_IN_3, MATE_IN_CHECK, MATED_IN_TWO, NO_QUICK_MATE, assert_mates

HANG_S = 5.0  # far beyond any deadline used here: only a search that ignores its deadline takes this


@pytest.fixture
def searcher():
    s = MateSearcher()
    yield s
    s.close()


def usi(line: list[int]) -> str:
    return " ".join(map(cshogi.move_to_usi, line))


def test_proves_mates_and_their_absence(searcher):
    assert usi(searcher.search(MATE_IN_3, [], 33).pv) == "R*1d 2d1c 1d1c+"
    assert_mates(MATE_IN_CHECK, usi(searcher.search(MATE_IN_CHECK, [], 33).pv))
    none = searcher.search(cshogi.STARTING_SFEN, [], 33)
    assert none.pv is None and none.proven_none


def test_defender_gets_the_longest_line_it_is_mated_in(searcher):
    board = cshogi.Board(MATE_IN_3)
    drop = board.move_from_usi("R*1d")
    assert usi(searcher.search(MATE_IN_3, [drop], 33, defender=True).pv) == "2d1c 1d1c+"
    assert searcher.search(NO_QUICK_MATE, [], 33, defender=True, max_nodes=5000).pv is None


def test_deadline_and_stop_end_a_long_search_and_the_child_is_replaced(searcher):
    start = time.monotonic()
    result = searcher.search(NO_QUICK_MATE, [], 37, deadline=start + 0.3)
    assert result.pv is None and not result.proven_none
    assert time.monotonic() - start < HANG_S
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    start = time.monotonic()
    assert searcher.search(NO_QUICK_MATE, [], 37, stopped=stop.is_set).pv is None  # no node or time limit
    assert time.monotonic() - start < HANG_S
    assert usi(searcher.search(MATE_IN_3, [], 33, deadline=time.monotonic() + HANG_S).pv) == "R*1d 2d1c 1d1c+"


def test_mated_in_two_needs_every_move_to_allow_a_mate_in_one():
    assert usi(mated_in_two(cshogi.Board(MATED_IN_TWO))) == "9c9d G*1b"
    assert mated_in_two(cshogi.Board()) is None


def test_leaf_mate_probe_sees_exactly_as_deep_as_asked():
    board = cshogi.Board(MATE_IN_3)
    assert [leaf_mate_value(board, plies) for plies in range(6)] == [None, None, None, 1.0, 1.0, 1.0]
    board.push_usi("R*1d")  # White is in check and mated in two whatever it plays
    assert [leaf_mate_value(board, plies) for plies in range(6)] == [None, None, None, 0.0, 0.0, 0.0]
    assert leaf_mate_value(cshogi.Board(MATED_IN_TWO), 7) is None  # its own mates only, not the defence
    assert leaf_mate_value(cshogi.Board(NO_QUICK_MATE), 7) is None
