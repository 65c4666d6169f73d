"""dlshogi move labels (27 directions x 81 squares = 2187) for move16 arrays and for legal moves.

A label depends only on move16 (to, from/drop piece, promotion) and the side to move, so we tabulate
cshogi's own `make_move_label` once over every 15-bit move16 and then label whole batches with one
numpy lookup (the trainer's hot path), exactly as cshogi would.
"""

from __future__ import annotations

from functools import lru_cache

import cshogi
import cshogi.dlshogi as dl
import numpy as np

NUM_MOVE_LABELS = 2187
NUM_DIRECTIONS = 27
MAX_LEGAL_MOVES = 593  # the most legal moves a shogi position can have
_DROP_BASE = 81  # move16 "from" field of a drop is 81 + piece type - 1 (pawn .. gold: 7 piece types)


def _valid_move16(m: int) -> bool:
    to, frm = m & 0x7F, (m >> 7) & 0x7F
    promote = bool(m & 0x4000)
    if to >= 81:
        return False
    if frm >= _DROP_BASE:
        return frm < _DROP_BASE + 7 and not promote
    return frm != to


@lru_cache(maxsize=1)
def label_table() -> np.ndarray:
    """int16 [2, 32768]: label of move16 for Black/White to move, -1 where move16 is not a move."""
    table = np.full((2, 1 << 15), -1, dtype=np.int16)
    for m in range(1 << 15):
        if _valid_move16(m):
            table[0, m] = dl.make_move_label(m, cshogi.BLACK)
            table[1, m] = dl.make_move_label(m, cshogi.WHITE)
    return table


def labels_from_move16(move16: np.ndarray, color: np.ndarray | int) -> np.ndarray:
    """Vectorised labels for arrays of move16 and side-to-move colours (broadcast)."""
    move16 = np.asarray(move16).astype(np.int64) & 0x7FFF
    return label_table()[np.asarray(color, dtype=np.int64), move16].astype(np.int64)


def legal_moves_and_labels(board: cshogi.Board) -> tuple[np.ndarray, np.ndarray]:
    """The position's legal moves (cshogi 32-bit ints) and their labels, in cshogi's generation order."""
    moves = np.fromiter(board.legal_moves, dtype=np.int64)
    labels = labels_from_move16(moves, board.turn)
    return moves, labels


def _mirror_move16(m: int) -> int:
    to, frm = m & 0x7F, (m >> 7) & 0x7F

    def mirror_sq(sq: int) -> int:
        return (8 - sq // 9) * 9 + sq % 9

    to = mirror_sq(to)
    if frm < _DROP_BASE:
        frm = mirror_sq(frm)
    return (m & 0x4000) | (frm << 7) | to


@lru_cache(maxsize=1)
def mirror_label_permutation() -> np.ndarray:
    """perm[label] = label of the left-right mirrored move (same for both colours); an involution."""
    table = label_table()
    perm = np.arange(NUM_MOVE_LABELS, dtype=np.int64)
    for m in np.flatnonzero(table[0] >= 0):
        perm[table[0, m]] = table[0, _mirror_move16(int(m))]
    return perm
