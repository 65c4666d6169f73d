"""The distillation teacher's interface: positions with the moves that led to them in; the teacher's move
probabilities over the legal moves and its win probability for the side to move out.

Every teacher sits behind it, so the game loop, the hcpe3 writer and resuming (train/teachers/distill.py),
the USI player (train/teachers/teacher_usi.py) and the benchmark are shared: one of our networks
(network_teacher) or miniosl's pretrained network (miniosl_teacher, the optional extra `teacher`), opened
by train/teachers/choose.py. This module imports neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import cshogi
import numpy as np

MINIOSL = "miniosl"  # --teacher miniosl[:PATH.onnx]


@dataclass(frozen=True)
class GamePosition:
    """A position with its game so far: miniosl's inputs include the last moves, so a bare position
    would make it a weaker teacher than it is."""

    start_sfen: str
    moves: Sequence[int]  # cshogi moves played from start_sfen
    board: cshogi.Board  # the position they reach (not changed by a teacher)


@dataclass(frozen=True)
class Judgement:
    """A teacher's answer for one position."""

    moves: np.ndarray  # the legal moves (cshogi ints), in cshogi's generation order
    labels: np.ndarray  # their dlshogi labels
    policy: np.ndarray  # float64 probabilities over `moves`, summing to 1
    value: float  # win probability of the side to move


class Teacher(Protocol):
    """A batched judge of positions; `judge` takes at most `max_batch` of them."""

    max_batch: int

    def judge(self, positions: Sequence[GamePosition]) -> list[Judgement]: ...

    def close(self) -> None: ...


def masked_softmax(logits: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Probabilities over the legal moves from their logits; moves outside `mask` (ones the teacher never
    plays) get exactly 0."""
    z = np.asarray(logits, np.float64)
    if mask is not None:
        z = np.where(mask, z, -np.inf)
    e = np.exp(z - z.max())
    return e / e.sum()


def miniosl_path(spec: str | None) -> str | None:
    """For `miniosl` or `miniosl:PATH` the ONNX path ('' for the package's own); None for a model of ours."""
    if spec is None or (spec != MINIOSL and not spec.startswith(MINIOSL + ":")):
        return None
    return spec[len(MINIOSL) + 1 :]
