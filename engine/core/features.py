"""dlshogi input features for batches of positions, filled in place by cshogi's C++ code.

input1: 62 planes (pieces, attacks, side to move first, White's board rotated);
input2: 57 planes (pieces in hand, check), or 119 with dlshogi's optional nyugyoku features.
"""

from __future__ import annotations

from collections.abc import Iterable

import cshogi
import cshogi.dlshogi as dl
import numpy as np

from engine.core.network_config import FEATURES1_NUM, FEATURES2_NUM, FEATURES2_NYUGYOKU_NUM


def features2_num(nyugyoku: bool = False) -> int:
    return FEATURES2_NYUGYOKU_NUM if nyugyoku else FEATURES2_NUM


def set_nyugyoku_features(use: bool) -> int:
    """Switch cshogi's (process-global) feature set; returns the input2 plane count now in force."""
    dl.use_nyugyoku_features(use)
    return features2_num(use)


def current_features2_num() -> int:
    import cshogi._cshogi as _c

    return int(_c._dlshogi_FEATURES2_NUM)


def ensure_features2(planes: int) -> None:
    """Make cshogi produce `planes` input2 planes (57 or 119), as a network expects."""
    if planes not in (FEATURES2_NUM, FEATURES2_NYUGYOKU_NUM):
        raise ValueError(f"input2 must have {FEATURES2_NUM} or {FEATURES2_NYUGYOKU_NUM} planes, not {planes}")
    if current_features2_num() != planes:
        set_nyugyoku_features(planes == FEATURES2_NYUGYOKU_NUM)


def alloc_features(n: int, planes2: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    planes2 = current_features2_num() if planes2 is None else planes2
    return (
        np.zeros((n, FEATURES1_NUM, 9, 9), dtype=np.float32),
        np.zeros((n, planes2, 9, 9), dtype=np.float32),
    )


def fill_features(board: cshogi.Board, x1: np.ndarray, x2: np.ndarray) -> None:
    """Write one position's features into views x1 [62,9,9] and x2 [57|119,9,9] (zeroed by cshogi).
    Calls the board's method that cshogi.dlshogi.make_input_features wraps: one Python call less per
    position on the search's hot path."""
    board._dlshogi_make_input_features(x1, x2)


def features_from_boards(
    boards: Iterable[cshogi.Board], out: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    boards = list(boards)
    x1, x2 = out if out is not None else alloc_features(len(boards))
    for i, board in enumerate(boards):
        dl.make_input_features(board, x1[i], x2[i])
    return x1[: len(boards)], x2[: len(boards)]


def features_from_hcps(
    hcps: np.ndarray, out: tuple[np.ndarray, np.ndarray] | None = None, board: cshogi.Board | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Features for an array of HuffmanCodedPos (uint8 [N,32] or cshogi's structured dtype)."""
    hcps = np.ascontiguousarray(hcps).view(np.uint8).reshape(-1, 32)
    n = len(hcps)
    x1, x2 = out if out is not None else alloc_features(n)
    board = board or cshogi.Board()
    for i in range(n):
        board.set_hcp(hcps[i])
        dl.make_input_features(board, x1[i], x2[i])
    return x1[:n], x2[:n]
