"""Reading OpenShogiLib's weighted opening book (`joseki.dat`, the book Debian's `gpsshogi-data` ships).

The book is a graph of positions built by gpsshogi's authors from strong players' games: per state the
games that passed through it (Black's and White's wins) and its moves, each with the next state and a
weight (the book's preference; 0 for a move seen in the games that the book does not play). Layout,
all big-endian int32: a header (version 1, states, moves, start state), per state (first move index,
move count, Black wins, White wins), per move (OSL move, next state, weight), then per state a
164-byte board that is not needed here: positions are rebuilt by replaying the moves from the start.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cshogi
import numpy as np

from engine.errors import UserError
from engine.records.formats import PathLike
from engine.records.hcpe3_games import existing_file

HEADER = np.dtype([("version", ">i4"), ("states", ">i4"), ("moves", ">i4"), ("start", ">i4")])
STATE = np.dtype([("first", ">i4"), ("count", ">i4"), ("black_wins", ">i4"), ("white_wins", ">i4")])
MOVE = np.dtype([("move", ">i4"), ("next", ">i4"), ("weight", ">i4")])
BOARD_BYTES = 41 * 4  # OSL's CompactBoard: 40 pieces and the side to move
# OSL's piece types that can be dropped, by their number in the move's bits 24-27.
DROP_PIECES = {9: "G", 10: "P", 11: "L", 12: "N", 13: "S", 14: "B", 15: "R"}


def osl_move_to_usi(value: int) -> str:
    """An OSL book move in USI: bits 0-7 the origin (file << 4 | rank; 0 for a drop), 8-15 the
    destination, bit 19 promotion, 24-27 the piece type (the dropped piece for a drop)."""
    v = value & 0xFFFFFFFF
    origin, dest = v & 0xFF, (v >> 8) & 0xFF
    if not 1 <= dest >> 4 <= 9 or not 1 <= dest & 0xF <= 9:
        raise ValueError(f"OSL move {value:#x}: destination out of the board")
    to = f"{dest >> 4}{chr(ord('a') + (dest & 0xF) - 1)}"
    if origin == 0:
        piece = DROP_PIECES.get((v >> 24) & 0xF)
        if piece is None:
            raise ValueError(f"OSL move {value:#x}: a drop of a piece that cannot be dropped")
        return f"{piece}*{to}"
    if not 1 <= origin >> 4 <= 9 or not 1 <= origin & 0xF <= 9:
        raise ValueError(f"OSL move {value:#x}: origin out of the board")
    return f"{origin >> 4}{chr(ord('a') + (origin & 0xF) - 1)}{to}" + ("+" if (v >> 19) & 1 else "")


@dataclass
class OslBook:
    """The tables of one book file, validated against each other."""

    path: Path
    start: int
    states: np.ndarray  # STATE records
    moves: np.ndarray  # MOVE records


@dataclass
class BookPosition:
    """One book state reached from the start: its board, games and moves (USI, weight, next state)."""

    index: int
    board: cshogi.Board
    black_wins: int
    white_wins: int
    moves: list[tuple[str, int, int]]


def read_osl_book(path: PathLike) -> OslBook:
    """The book's tables; a UserError naming the file if it is not an OSL weighted book."""
    p = existing_file(path)
    size = p.stat().st_size
    if size < HEADER.itemsize:
        raise UserError(f"{p}: not an OSL opening book (shorter than its header)")
    mm = np.memmap(p, dtype=np.uint8, mode="r")
    head = mm[: HEADER.itemsize].view(HEADER)[0]
    n_states, n_moves = int(head["states"]), int(head["moves"])
    expected = HEADER.itemsize + n_states * (STATE.itemsize + BOARD_BYTES) + n_moves * MOVE.itemsize
    if int(head["version"]) != 1 or n_states <= 0 or n_moves < 0 or expected != size:
        raise UserError(
            f"{p}: not an OSL opening book (version {int(head['version'])}, {n_states} states and "
            f"{n_moves} moves need {expected} bytes; the file has {size})"
        )
    states_end = HEADER.itemsize + n_states * STATE.itemsize
    states = mm[HEADER.itemsize : states_end].view(STATE)
    moves = mm[states_end : states_end + n_moves * MOVE.itemsize].view(MOVE)
    start = int(head["start"])
    bad_state = (states["first"] < 0) | (states["count"] < 0) | (states["first"] + states["count"] > n_moves)
    bad_state |= (states["black_wins"] < 0) | (states["white_wins"] < 0)
    bad_move = (moves["next"] < 0) | (moves["next"] >= n_states) | (moves["weight"] < 0)
    if not 0 <= start < n_states or bad_state.any() or bad_move.any():
        raise UserError(f"{p}: damaged OSL opening book (a state or move index out of range)")
    return OslBook(p, start, states, moves)


def iter_book_positions(book: OslBook) -> Iterator[BookPosition]:
    """Every state reachable from the start, breadth first, each once. A move that is not legal in
    its position, or two paths to one state that disagree on its board, is a UserError: the file
    is then not what it claims to be."""
    board = cshogi.Board()
    sfens = {book.start: board.sfen()}
    queue = deque([book.start])
    while queue:
        index = queue.popleft()
        board = cshogi.Board(sfens[index])
        state = book.states[index]
        first, count = int(state["first"]), int(state["count"])
        moves = []
        for raw, nxt, weight in book.moves[first : first + count].tolist():
            try:
                usi = osl_move_to_usi(raw)
            except ValueError as e:
                raise UserError(f"{book.path}: state {index}: {e}") from None
            move = board.move_from_usi(usi)
            if not move or not board.is_legal(move):
                raise UserError(f"{book.path}: state {index}: move {usi} is not legal in {board.sfen()}")
            board.push(move)
            placed = board.sfen().rsplit(" ", 1)[0]  # without the move number, which paths differ in
            board.pop()
            seen = sfens.get(nxt)
            if seen is None:
                sfens[nxt] = f"{placed} 1"
                queue.append(nxt)
            elif seen.rsplit(" ", 1)[0] != placed:
                raise UserError(f"{book.path}: state {nxt} is reached with two different boards")
            moves.append((usi, weight, nxt))
        yield BookPosition(index, board, int(state["black_wins"]), int(state["white_wins"]), moves)
