"""The root's best moves as MultiPV lines (the USI engine's `MultiPV` option), read from a finished or
running search: the k most visited root moves, each with its value and principal variation.

The first line is always the search's own answer (its bestmove, value, PV and mate length, as the
single `info` line reports them), so `multipv 1` is the move the engine plays; the others follow by
visits, then by value, then by prior (a move not yet visited has the root position's value). A PUCT
tree is read in place (engine.search.puct, engine.search.puct_tree through the same node attributes);
a Gumbel search keeps what is needed in its result when `GumbelParams.root_lines` asks for it.
"""

from __future__ import annotations

import numpy as np

from engine.search.control import PuctResult, RootLine
from engine.search.gumbel_search import GumbelResult
from engine.search.puct import Search

MAX_PV = 64  # plies of each line, as the single PV


def root_lines(search: Search, r: PuctResult, k: int) -> list[RootLine]:
    """Up to `k` lines for the root of `search`, whose result (so far) is `r`; none without a move."""
    if r.bestmove is None or k < 1:
        return []
    first = RootLine(r.bestmove, r.value, r.pv, r.mate_plies)
    if k == 1:
        return [first]
    if search.params.mode == "gumbel":
        others = _gumbel_lines(search.gumbel_result, r, k - 1)
    else:
        others = _puct_lines(search, r, k - 1)
    return [first, *others]


def _order(visits: np.ndarray, values: np.ndarray, priors: np.ndarray) -> list[int]:
    """Indices by visits, then value, then prior, all descending."""
    return np.lexsort((priors, values, visits))[::-1].tolist()


def _puct_lines(search: Search, r: PuctResult, k: int) -> list[RootLine]:
    root = search.root
    if root is None or root.moves is None:
        return []
    moves, q = root.moves, root.q()
    children = root.children
    lines = []
    for idx in _order(root.child_n, q, root.priors):
        move = int(moves[idx])
        if move == r.bestmove:
            continue
        if len(lines) == k:
            break
        child = children[idx]
        rest = search.principal_variation(MAX_PV - 1, child) if child is not None else []
        lines.append(RootLine(move, float(q[idx]), [move, *rest]))
    return lines


def _gumbel_lines(g: GumbelResult | None, r: PuctResult, k: int) -> list[RootLine]:
    if g is None or g.visits is None or g.q is None:
        return []  # a forced move (searched no further), or a search that recorded no lines
    values = np.where(g.visits > 0, g.q, r.value)
    lines = []
    for idx in _order(g.visits, values, g.policy):
        move = int(g.moves[idx])
        if move == r.bestmove:
            continue
        if len(lines) == k:
            break
        lines.append(RootLine(move, float(values[idx]), [move, *g.lines.get(idx, [])][:MAX_PV]))
    return lines
