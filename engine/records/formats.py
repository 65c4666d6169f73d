"""Training-record formats: the packed dtypes of hcpe, hcpe3 and the seed `.data` format, and one hcpe3 game.

Self-play, the converters and the trainer must agree byte for byte with dlshogi's files, so every
format is one little-endian packed numpy dtype here. An hcpe3 header's `result` is engine.core.rules'
encoding (winner in RESULT_MASK, then reason bits).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import cshogi
import numpy as np

from engine.core.moves import NUM_MOVE_LABELS

PathLike = str | os.PathLike

# hcpe3 header `opponent`: where the game came from.
OPPONENT_SELFPLAY = 0
OPPONENT_USI_BLACK = 1
OPPONENT_USI_WHITE = 2

HCP = np.dtype(cshogi.HuffmanCodedPos)
HCPE = np.dtype(cshogi.HuffmanCodedPosAndEval)
HCPE3_HEADER = np.dtype([("hcp", "u1", 32), ("moveNum", "<u2"), ("result", "u1"), ("opponent", "u1")])
MOVE_INFO = np.dtype([("selectedMove16", "<u2"), ("eval", "<i2"), ("candidateNum", "<u2")])
MOVE_VISITS = np.dtype([("move16", "<u2"), ("visitNum", "<u2")])
DATA = np.dtype([("hcp", "u1", 32), ("policy", "<f4", NUM_MOVE_LABELS), ("result", "u1")])

assert (HCP.itemsize, HCPE.itemsize, HCPE3_HEADER.itemsize) == (32, 38, 36)
assert (MOVE_INFO.itemsize, MOVE_VISITS.itemsize, DATA.itemsize) == (6, 4, 8781)

EXTENSIONS = {".hcpe": "hcpe", ".hcpe3": "hcpe3", ".cache": "cache", ".hcpe3cache": "cache", ".data": "data"}


@dataclass
class Hcpe3Game:
    """One hcpe3 game: start position, result bits, origin, and per move its info and candidates."""

    hcp: np.ndarray  # 32 u1, start position
    result: int  # GameResult | reason bits
    opponent: int
    moves: np.ndarray  # MOVE_INFO[moveNum]
    candidates: list[np.ndarray]  # one MOVE_VISITS array per move
