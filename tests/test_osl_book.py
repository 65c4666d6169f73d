"""OSL opening books (gpsshogi's joseki.dat): the move code, the reader's checks, the training cache."""

from __future__ import annotations

import struct
from pathlib import Path

import cshogi
import numpy as np
import pytest

from engine.errors import UserError
from engine.play.book import GPSSHOGI_BOOK
from engine.records.osl_book import BOARD_BYTES, iter_book_positions, osl_move_to_usi, read_osl_book
from tests.test_convert import run_cli
from train.data import convert
from train.data.detect import detect_format
from train.data.hcpe3_cache import Hcpe3Cache

PAWN, SILVER, BISHOP = 10, 13, 14  # OSL's piece type numbers
BLACK, WHITE = 0, -1  # OSL's players, in the move's top bits


Square = tuple[int, int]  # (file, rank)


def osl_move(origin: Square | None, to: Square, ptype: int, player: int, promote: bool = False) -> int:
    """The OSL book code of a move (OMove's layout), as the signed int the file stores."""
    bits = (origin[0] << 4 | origin[1]) if origin else 0
    bits |= to[0] << 12 | to[1] << 8 | int(promote) << 19 | ptype << 24 | (player & 0xF) << 28
    return struct.unpack(">i", struct.pack(">I", bits))[0]


BookState = tuple[int, int, list[tuple[int, int, int]]]


def write_book(path: Path, states: list[BookState], version: int = 1) -> None:
    """A book file: per state (Black wins, White wins, [(move, next state, weight)]); state 0 starts.
    The boards section is zeros: the reader rebuilds positions from the moves."""
    moves = [m for _, _, ms in states for m in ms]
    out = [struct.pack(">4i", version, len(states), len(moves), 0)]
    first = 0
    for black, white, ms in states:
        out.append(struct.pack(">4i", first, len(ms), black, white))
        first += len(ms)
    out += [struct.pack(">3i", *m) for m in moves]
    out.append(bytes(BOARD_BYTES * len(states)))
    path.write_bytes(b"".join(out))


P76 = osl_move((7, 7), (7, 6), PAWN, BLACK)  # 7g7f
P26 = osl_move((2, 7), (2, 6), PAWN, BLACK)  # 2g2f
P34 = osl_move((3, 3), (3, 4), PAWN, WHITE)  # 3c3d
P84 = osl_move((8, 3), (8, 4), PAWN, WHITE)  # 8c8d


def small_book(path: Path) -> None:
    """Start: 7g7f (weight 8000) or 2g2f (2000); after 7g7f, 3c3d (10000) or 8c8d (0: seen, not
    played); after 2g2f, only an unplayed 3c3d; the leaves have no moves."""
    write_book(
        path,
        [
            (60, 40, [(P76, 1, 8000), (P26, 2, 2000)]),
            (50, 30, [(P34, 3, 10000), (P84, 4, 0)]),
            (10, 10, [(P34, 5, 0)]),
            (3, 0, []),
            (1, 2, []),
            (0, 0, []),
        ],
    )


def test_osl_move_codes():
    assert osl_move_to_usi(P76) == "7g7f" and osl_move_to_usi(P34) == "3c3d"
    assert osl_move_to_usi(osl_move(None, (5, 5), PAWN, WHITE)) == "P*5e"
    assert osl_move_to_usi(osl_move(None, (4, 4), SILVER, BLACK)) == "S*4d"
    assert osl_move_to_usi(osl_move((8, 8), (2, 2), BISHOP, BLACK, promote=True)) == "8h2b+"
    with pytest.raises(ValueError, match="destination"):
        osl_move_to_usi(osl_move((7, 7), (0, 6), PAWN, BLACK))
    with pytest.raises(ValueError, match="cannot be dropped"):
        osl_move_to_usi(osl_move(None, (5, 5), 8, BLACK))  # a king


def test_positions_replayed_from_the_start(tmp_path: Path):
    small_book(tmp_path / "b.dat")
    positions = {p.index: p for p in iter_book_positions(read_osl_book(tmp_path / "b.dat"))}
    assert sorted(positions) == [0, 1, 2, 3, 4, 5]
    assert positions[0].board.sfen() == cshogi.Board().sfen()
    assert positions[0].moves == [("7g7f", 8000, 1), ("2g2f", 2000, 2)]
    expected = cshogi.Board()
    for usi in ("7g7f", "8c8d"):
        expected.push_usi(usi)
    assert positions[4].board.sfen().rsplit(" ", 1)[0] == expected.sfen().rsplit(" ", 1)[0]
    assert (positions[4].black_wins, positions[4].white_wins) == (1, 2)


def test_book_to_cache_targets(tmp_path: Path):
    small_book(tmp_path / "b.dat")
    counts = convert.osl_book_to_cache(tmp_path / "b.dat", tmp_path / "book.cache", prior_games=10)
    assert counts["positions"] == 2 and counts["states"] == 6 and counts["no weighted move"] == 4
    assert detect_format(tmp_path / "book.cache") == "cache"  # bin/train takes it as it is
    cache = Hcpe3Cache(tmp_path / "book.cache")
    entries = {}
    for i in range(len(cache)):
        hcp, value, result, move16s, probs = cache.entry(i)
        board = cshogi.Board()
        board.set_hcp(hcp)
        moves = {
            cshogi.move_to_usi(board.move_from_move16(int(m))): float(p)
            for m, p in zip(move16s, probs, strict=True)
        }
        entries[board.turn] = (value, result, moves)
    # The start: Black to move, 60 won of 100, shrunk by 10 virtual games: 65 / 110.
    value, result, moves = entries[cshogi.BLACK]
    assert value == pytest.approx(65 / 110) and result == pytest.approx(65 / 110)
    assert moves == pytest.approx({"7g7f": 0.8, "2g2f": 0.2})
    # After 7g7f, White to move: White's 30 wins of 80; the unplayed 8c8d is no target.
    value, result, moves = entries[cshogi.WHITE]
    assert value == pytest.approx(35 / 90) and moves == pytest.approx({"3c3d": 1.0})


def test_damaged_books_are_user_errors(tmp_path: Path):
    path = tmp_path / "b.dat"
    small_book(path)
    data = path.read_bytes()
    path.write_bytes(data[:-1])
    with pytest.raises(UserError, match="not an OSL opening book"):
        read_osl_book(path)
    write_book(path, [(1, 1, [(P76, 1, 1)]), (0, 0, [])], version=2)
    with pytest.raises(UserError, match="not an OSL opening book .version 2"):
        read_osl_book(path)
    write_book(path, [(1, 1, [(P76, 7, 1)]), (0, 0, [])])
    with pytest.raises(UserError, match="damaged OSL opening book"):
        read_osl_book(path)
    write_book(path, [(1, 1, [(P34, 1, 1)]), (0, 0, [])])  # White's move with Black to move
    with pytest.raises(UserError, match="state 0: move 3c3d is not legal"):
        list(iter_book_positions(read_osl_book(path)))
    write_book(path, [(1, 1, [(P76, 1, 1), (P26, 1, 1)]), (0, 0, [])])  # two moves, one next state
    with pytest.raises(UserError, match="state 1 is reached with two different boards"):
        list(iter_book_positions(read_osl_book(path)))
    write_book(path, [(1, 1, [(P76, 1, 0)]), (0, 0, [])])
    with pytest.raises(UserError, match="plays no move"):
        convert.osl_book_to_cache(path, tmp_path / "x.cache")
    assert not (tmp_path / "x.cache").exists()


def test_cli(tmp_path: Path):
    small_book(tmp_path / "b.dat")
    proc = run_cli("osl-book-to-cache", "b.dat", "-o", "b.cache", "--prior-games", "0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "positions:" in proc.stdout and len(Hcpe3Cache(tmp_path / "b.cache")) == 2
    (tmp_path / "junk.dat").write_bytes(b"\0" * 40)
    proc = run_cli("osl-book-to-cache", "junk.dat", "-o", "j.cache", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("convert: error: junk.dat: not an OSL opening book")


@pytest.mark.skipif(not GPSSHOGI_BOOK.is_file(), reason="Debian's gpsshogi-data is not installed")
def test_gpsshogi_book(tmp_path: Path):
    """The book gpsshogi's authors made: every move legal, every state one board, the start's moves
    those of strong players (7g7f and 2g2f played, the rest seen in the games)."""
    book = read_osl_book(GPSSHOGI_BOOK)
    positions = list(iter_book_positions(book))
    assert len(positions) > 40_000
    start = positions[0]
    assert start.board.sfen() == cshogi.Board().sfen() and start.black_wins + start.white_wins > 20_000
    assert {u for u, w, _ in start.moves if w > 0} == {"7g7f", "2g2f"}
    counts = convert.osl_book_to_cache(GPSSHOGI_BOOK, tmp_path / "gps.cache")
    cache = Hcpe3Cache(tmp_path / "gps.cache")
    assert len(cache) == counts["positions"] > 20_000
    _, value, _, _, probs = cache.entry(0)
    assert 0.5 < value < 0.6 and np.sum(probs) == pytest.approx(1.0)  # Black's first-move edge
