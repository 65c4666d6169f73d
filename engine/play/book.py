"""The engine's opening book: positions mapped to the moves a book plays there, with their weights.

It is read from an OpenShogiLib weighted book (gpsshogi's `joseki.dat`, Debian's `gpsshogi-data`), whose
positions engine.records.osl_book rebuilds from the start: a position is known by its board, hands
and side to move (the SFEN without its move number), so a line that transposes into a book position
finds it too. Only moves the book plays (weight > 0) are kept.
"""

from __future__ import annotations

from pathlib import Path

import cshogi
import numpy as np

from engine.records.osl_book import iter_book_positions, read_osl_book

GPSSHOGI_BOOK = Path("/usr/share/gpsshogi-data/data/joseki.dat")  # Debian's gpsshogi-data


def default_book_path() -> Path | None:
    """gpsshogi's book where it is installed: Book_File's default, as dlshogi's engine plays its book."""
    return GPSSHOGI_BOOK if GPSSHOGI_BOOK.is_file() else None


def position_key(board: cshogi.Board) -> str:
    """The board, hands and side to move: the SFEN less its move number."""
    return board.sfen().rsplit(" ", 1)[0]


class OpeningBook:
    """Book moves by position, each list heaviest first."""

    def __init__(self, path: Path, entries: dict[str, list[tuple[str, int]]]) -> None:
        self.path = path
        self.entries = entries

    @classmethod
    def load(cls, path: Path) -> OpeningBook:
        """The book in an OSL weighted book file; UserError (naming the file) if it is not one."""
        entries = {}
        for pos in iter_book_positions(read_osl_book(path)):
            played = sorted(((usi, w) for usi, w, _ in pos.moves if w > 0), key=lambda m: -m[1])
            if played:
                entries[position_key(pos.board)] = played
        return cls(path, entries)

    def __len__(self) -> int:
        return len(self.entries)

    def moves(self, board: cshogi.Board) -> list[tuple[str, int]]:
        """The book's moves in this position (none if it is not in the book), heaviest first."""
        return self.entries.get(position_key(board), [])


def choose_book_move(moves: list[tuple[str, int]], best: bool, rng: np.random.Generator) -> str:
    """The heaviest move, or one drawn in proportion to the weights (the book's own variety)."""
    if best:
        return moves[0][0]
    weights = np.array([w for _, w in moves], np.float64)
    return moves[int(rng.choice(len(moves), p=weights / weights.sum()))][0]


class BookSlot:
    """The book the options name, loaded once per file: `sync` at isready, `book` for each move."""

    def __init__(self) -> None:
        self.book: OpeningBook | None = None
        self._path: Path | None = None

    def sync(self, path: Path | None) -> OpeningBook | None:
        """Load `path` if it is not the loaded book (None: no book). Raises what OpeningBook.load
        raises, with no book left loaded."""
        if path != self._path:
            self.book, self._path = None, None
            if path is not None:
                self.book = OpeningBook.load(path)
                self._path = path
        return self.book
