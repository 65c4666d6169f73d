"""When a search stops (SearchControl, which the USI layer changes while it runs) and what it returns
(PuctResult): shared by the PUCT trees (engine.search.puct, engine.search.puct_tree) and their callers."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


def can_stop_early(best_visits: int, second_visits: int, remaining_playouts: float) -> bool:
    """The most visited move cannot be overtaken by the playouts we can still afford."""
    return best_visits - second_visits > remaining_playouts


@dataclass
class SearchControl:
    """When to stop; the USI layer may change it during the search (ponderhit, stop).

    Deadlines are time.monotonic() seconds; while `infinite` is set only `stopped` and the node
    limit end the search."""

    stopped: bool = False
    infinite: bool = False
    target: float | None = None
    hard: float | None = None
    max_playouts: int | None = None
    saving: float | None = None  # stopping early before `target` saves clock time only until this
    start: float = field(default_factory=time.monotonic)


@dataclass
class PuctResult:
    bestmove: int | None  # None: no legal move
    ponder: int | None
    value: float  # for the side to move at the root
    pv: list[int]
    playouts: int
    nodes: int
    depth: int
    seldepth: int
    elapsed: float
    mate_plies: int | None = None  # a forced win found in the tree, in plies


@dataclass
class RootLine:
    """One root move as a MultiPV line: its value for the side to move at the root, its principal
    variation (the move first) and, when the search proved one, the forced win's length in plies."""

    move: int
    value: float
    pv: list[int]
    mate_plies: int | None = None
