"""Mate search at the root with cshogi's df-pn, bounded by nodes because it holds the GIL while it runs.

`go mate` needs a time limit and `stop`; df-pn cannot be interrupted from Python, so it runs in
rounds of doubling node budgets (each round restarts; at most 2x the work of one long search) and
checks the deadline and the stop flag between rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import cshogi

DFPN_NODES_PER_MS = 1000  # cshogi's df-pn runs at roughly 1M nodes/s on one core
MIN_ROUND_NODES = 10_000
MAX_DEPTH = 37


@dataclass(frozen=True)
class MateResult:
    """`pv` is the mating line when mate was proven; `proven_none` when the search proved there is none
    (within `depth`); neither: it ran out of nodes or time."""

    pv: list[int] | None
    proven_none: bool = False


def dfpn(board: cshogi.Board, depth: int, nodes: int) -> MateResult:
    """One df-pn search of the side to move's mate within `depth` plies and `nodes` nodes."""
    search = cshogi.DfPn(depth, nodes)
    if search.search(board):
        return MateResult(list(search.get_pv(board)))
    return MateResult(None, proven_none=search.searched_node < nodes)


def mate_search(
    board: cshogi.Board,
    depth: int,
    deadline: float | None,
    stopped: Callable[[], bool],
    max_nodes: int | None = None,
) -> MateResult:
    """Rounds of doubling node budgets until mate is proven or disproven, `deadline`
    (time.monotonic(); None = no limit), `stopped()` or `max_nodes`."""
    nodes = MIN_ROUND_NODES
    while True:
        if deadline is not None:
            left_ms = (deadline - time.monotonic()) * 1000
            nodes = min(nodes, int(left_ms * DFPN_NODES_PER_MS))
            if nodes < 1000:
                return MateResult(None)
        if max_nodes is not None:
            nodes = min(nodes, max_nodes)
        result = dfpn(board, depth, nodes)
        if result.pv is not None or result.proven_none:
            return result
        if stopped() or (max_nodes is not None and nodes >= max_nodes) or nodes >= 2**31:
            return result
        nodes *= 2
