"""The engine's opening book: lookups by position, the choice among book moves, the USI options."""

from __future__ import annotations

from pathlib import Path

import cshogi
import numpy as np
import pytest

from engine.errors import UserError
from engine.play.book import GPSSHOGI_BOOK, BookSlot, OpeningBook, choose_book_move
from engine.play.options import default_options
from tests.test_osl_book import small_book
from tests.test_usi import FAST, read_until, send, start

OPTIONS = {o.name: o.default for o in default_options()}


@pytest.fixture(scope="module")
def book_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("book") / "book.dat"
    small_book(path)
    return path


def board_after(*moves: str) -> cshogi.Board:
    board = cshogi.Board()
    for m in moves:
        board.push_usi(m)
    return board


def test_lookup_keeps_played_moves_heaviest_first(book_file: Path):
    book = OpeningBook.load(book_file)
    assert len(book) == 2  # the start and the position after 7g7f: the others play nothing
    assert book.moves(cshogi.Board()) == [("7g7f", 8000), ("2g2f", 2000)]
    assert book.moves(board_after("7g7f")) == [("3c3d", 10000)]  # 8c8d (weight 0) is not a book move
    assert book.moves(board_after("2g2f")) == []
    # The same position at another move number (a GUI's `position sfen ... 31`) is the same entry.
    later = cshogi.Board(board_after("7g7f").sfen().rsplit(" ", 1)[0] + " 31")
    assert book.moves(later) == [("3c3d", 10000)]


def test_choice_follows_the_weights():
    moves = [("7g7f", 8000), ("2g2f", 2000)]
    assert choose_book_move(moves, best=True, rng=np.random.default_rng(0)) == "7g7f"
    rng = np.random.default_rng(1)
    picks = [choose_book_move(moves, best=False, rng=rng) for _ in range(2000)]
    assert 0.75 < picks.count("7g7f") / len(picks) < 0.85


def test_book_file_defaults_to_gpsshogis_book_where_installed():
    assert OPTIONS["Book_File"] == (str(GPSSHOGI_BOOK) if GPSSHOGI_BOOK.is_file() else "")
    assert OPTIONS["USI_OwnBook"] is True


def test_slot_loads_once_and_forgets_a_bad_file(book_file: Path, tmp_path: Path):
    slot = BookSlot()
    book = slot.sync(book_file)
    assert slot.sync(book_file) is book and slot.sync(None) is None
    (tmp_path / "junk.dat").write_bytes(b"\0" * 20)
    with pytest.raises(UserError, match="not an OSL opening book"):
        slot.sync(tmp_path / "junk.dat")
    assert slot.book is None


def bestmove(engine, position: str) -> tuple[str, list[str]]:
    send(engine, position)
    send(engine, "go byoyomi 300")
    lines = read_until(engine, "bestmove")
    return lines[-1].split()[1], lines


def test_engine_plays_the_book_then_searches(tiny_model, book_file: Path):
    options = {"USI_OwnBook": "true", "Book_File": book_file, "Book_Best_Move": "true"}
    engine = start({"DNN_Model": tiny_model, **FAST, **options})
    try:
        move, lines = bestmove(engine, "position startpos")
        assert move == "7g7f" and "info string book 7g7f (7g7f:8000 2g2f:2000)" in lines
        move, lines = bestmove(engine, "position startpos moves 7g7f")
        assert move == "3c3d"
        move, lines = bestmove(engine, "position startpos moves 2g2f")  # in the book, nothing to play
        assert not any("book" in line for line in lines) and any(" nodes " in line for line in lines)
        send(engine, "setoption name Book_Moves value 1")  # the book for move 1 only
        move, lines = bestmove(engine, "position startpos moves 7g7f")
        assert not any("info string book" in line for line in lines)
        send(engine, "setoption name Book_Moves value 64")
        send(engine, "setoption name USI_OwnBook value false")
        move, lines = bestmove(engine, "position startpos")
        assert not any("info string book" in line for line in lines)
    finally:
        engine.quit()


def test_engine_with_a_bad_book_says_so_and_plays(tiny_model, tmp_path: Path):
    (tmp_path / "junk.dat").write_bytes(b"\0" * 20)
    engine = start({"DNN_Model": tiny_model, **FAST, "USI_OwnBook": "true"})
    try:
        send(engine, f"setoption name Book_File value {tmp_path / 'junk.dat'}")
        send(engine, "isready")
        lines = read_until(engine, "readyok")
        assert any(
            line.startswith("info string error: Book_File: ") and "not an OSL opening book" in line
            for line in lines
        ), lines
        move, _ = bestmove(engine, "position startpos")
        assert move in {cshogi.move_to_usi(m) for m in cshogi.Board().legal_moves}
    finally:
        engine.quit()


@pytest.mark.skipif(not GPSSHOGI_BOOK.is_file(), reason="Debian's gpsshogi-data is not installed")
def test_engine_plays_gpsshogis_book_by_default(tiny_model):
    assert OPTIONS["Book_File"] == str(GPSSHOGI_BOOK)
    engine = start({"DNN_Model": tiny_model, **FAST, "USI_OwnBook": "true"})  # Book_File as it comes
    try:
        move, lines = bestmove(engine, "position startpos")
        assert move in {"7g7f", "2g2f"} and any(line.startswith("info string book ") for line in lines)
        move, _ = bestmove(engine, "position startpos moves 7g7f 3c3d")
        assert move in {u for u, w in OpeningBook.load(GPSSHOGI_BOOK).moves(board_after("7g7f", "3c3d"))}
    finally:
        engine.quit()
