"""The fast Gumbel AlphaZero search: gumbel_search's algorithm, simulation for simulation, over a
flat-array tree with numba kernels (tree_kernels) instead of per-node objects.

engine.search.gumbel_search stays the readable reference; tests hold this one to the same chosen moves and
policy targets. Per simulation the work left in Python is the board walk (push/pop), the rules'
terminal checks, one cache lookup and, for a new position, legal-move generation and its features.
The interface is the reference's: `run(board, rng)` yields whenever the shared `LeafBatch` must be
evaluated, so many games share one network call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator

import cshogi
import numpy as np

from engine.backends.evaluator import UniformEvaluator
from engine.core.moves import label_table
from engine.core.rules import terminal_and_moves
from engine.search import gumbel
from engine.search import tree_kernels as tk
from engine.search.eval_cache import EvalCache
from engine.search.gumbel_search import LeafBatch, SearchParams, SearchResult, search_position

MAX_LEGAL_MOVES = 593  # the most legal moves a shogi position can have
_NO_LOGITS = np.empty(0, dtype=np.float32)
_NO_MOVES = np.empty(0, dtype=np.int32)


_EDGE_ARRAYS = ("child", "N", "W", "logit", "prob", "move", "label")


class Tree:
    """Preallocated arrays for one search of at most `max_nodes` nodes (see engine.search.tree_kernels);
    the edge arrays start at room for 128 legal moves a node and double when a search needs more.
    `slots` leaves of a round can wait on the network at once: their nodes, batch rows and paths
    (paths[slot, :length]) are kept here until the batch is evaluated."""

    def __init__(self, max_nodes: int, slots: int) -> None:
        edges = max_nodes * 128
        self.first = np.zeros(max_nodes + 1, dtype=np.int32)
        self.value = np.zeros(max_nodes, dtype=np.float64)  # the network's or the exact value
        self.exact = np.zeros(max_nodes, dtype=np.bool_)
        self.ready = np.zeros(max_nodes, dtype=np.bool_)  # has its priors (exact nodes never do)
        self.child = np.empty(edges, dtype=np.int32)
        self.N = np.empty(edges, dtype=np.int32)
        self.W = np.empty(edges, dtype=np.float64)
        self.logit = np.empty(edges, dtype=np.float64)
        self.prob = np.empty(edges, dtype=np.float64)
        self.move = np.empty(edges, dtype=np.int32)
        self.label = np.empty(edges, dtype=np.int64)
        self.paths = np.empty((slots, max_nodes + 1), dtype=np.int64)
        self.path_moves = np.empty((slots, max_nodes + 1), dtype=np.int64)
        self.lengths = np.empty(slots, dtype=np.int64)
        self.work = np.empty(MAX_LEGAL_MOVES, dtype=np.float64)
        self.round = np.empty(MAX_LEGAL_MOVES, dtype=np.int64)
        self.wait_node = np.empty(slots, dtype=np.int64)
        self.wait_row = np.empty(slots, dtype=np.int64)
        self.wait_slot = np.empty(slots, dtype=np.int64)
        self.wait_length = np.empty(slots, dtype=np.int64)
        self.kinds = np.empty(slots, dtype=np.int8)  # per new leaf of a round: see tree_kernels.create_leaves
        self.leaf_value = np.empty(slots, dtype=np.float64)
        self.leaf_count = np.empty(slots, dtype=np.int64)
        self.wait_entries: list[tuple[int, np.ndarray]] = []  # (key, moves) of each, for the cache
        self.logits_out = np.empty(slots * MAX_LEGAL_MOVES, dtype=np.float32)
        self.size = 0

    def edges(self, node: int) -> slice:
        return slice(int(self.first[node]), int(self.first[node + 1]))

    def grow_edges(self, need: int) -> None:
        """Room for at least `need` edges."""
        for name in _EDGE_ARRAYS:
            old = getattr(self, name)
            new = np.empty(max(2 * len(old), need), dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)


class TreeSearch:
    """Gumbel AlphaZero search over one board at a time per `run`, sharing a cache and a leaf batch
    with other searches (the games of a self-play group)."""

    def __init__(self, params: SearchParams, cache: EvalCache, batch: LeafBatch) -> None:
        self.params = params
        self.cache = cache
        self.batch = batch
        self._trees: list[Tree] = []  # idle trees, reused by the next run
        self._table = label_table()

    def _simulate(self, t: Tree, board: cshogi.Board, leaves: int) -> int:
        """Create the new leaves that plan_and_descend reached (leaf i by t.path_moves[i, :t.lengths[i]];
        length 0: the root itself). A position the rules decide or the cache knows is backed up at
        once; the others wait on rows of the leaf batch. Returns how many wait."""
        p = self.params
        root_turn = board.turn
        push, pop, get, add = board.push, board.pop, self.cache.get, self.batch.add
        kinds, values, counts = t.kinds, t.leaf_value, t.leaf_count
        move_parts: list[np.ndarray] = []
        logit_parts: list[np.ndarray] = []
        waiting = 0
        size = t.size
        lengths = t.lengths[:leaves].tolist()
        for i, line in enumerate(t.path_moves[:leaves].tolist()):
            length = lengths[i]
            line = line[:length]
            for m in line:
                push(m)
            if length:
                end, legal = terminal_and_moves(board, p.max_moves)
                if end is not None:
                    turn = board.turn
                    exact = end.value(turn, p.draw_value if turn == root_turn else 1.0 - p.draw_value)
                elif not board.is_check() and board.mate_move_in_1ply():
                    exact = 1.0
                else:
                    exact = None
            else:
                legal, exact = board.legal_moves, None
            if exact is not None:
                kinds[i], values[i], counts[i] = tk.EXACT, exact, 0
            else:
                key = board.zobrist_hash()
                cached = get(key)
                if cached is not None:
                    moves, logits, values[i] = cached
                    kinds[i] = tk.CACHED
                    logit_parts.append(logits)
                else:
                    moves = np.fromiter(legal, dtype=np.int32)
                    kinds[i] = tk.WAITING
                    t.wait_node[waiting] = size + i
                    t.wait_row[waiting] = add(board, key)
                    t.wait_slot[waiting] = i
                    t.wait_length[waiting] = length
                    t.wait_entries.append((key, moves))
                    waiting += 1
                counts[i] = len(moves)
                move_parts.append(moves)
            for _ in line:
                pop()
        moves = _joined(move_parts, _NO_MOVES)
        need = int(t.first[size]) + len(moves)
        if need > len(t.move):
            t.grow_edges(need)
        tk.create_leaves(
            leaves, size, root_turn, kinds, values, counts, moves,
            _joined(logit_parts, _NO_LOGITS), self._table, t.lengths, t.first,
            t.child, t.N, t.W, t.move, t.label, t.logit, t.prob, t.value, t.ready, t.exact, t.paths,
        )  # fmt: skip
        t.size = size + leaves
        return waiting

    def _resolve(self, t: Tree, count: int) -> None:
        """Give the waiting leaves their network output (from the evaluated batch), back it up and
        cache it."""
        tk.resolve(
            count, t.wait_node, t.wait_row, t.wait_slot, t.wait_length, t.paths, self.batch.policy,
            self.batch.value, t.first, t.label, t.logit, t.prob, t.value, t.ready, t.N, t.W, t.logits_out,
        )  # fmt: skip
        self._cache_waiting(t, count)

    def _cache_waiting(self, t: Tree, count: int) -> None:
        """Store the resolved leaves' legal-move logits (t.logits_out) and values in the cache."""
        self.cache.put_many(t.wait_entries, t.logits_out, self.batch.value[t.wait_row[:count]].tolist())
        t.wait_entries.clear()

    def _tree(self) -> Tree:
        tree = self._trees.pop() if self._trees else Tree(self.params.sims + 2, self.params.considered + 1)
        tree.size = 0
        tree.first[0] = 0
        tree.wait_entries.clear()  # left by a search stopped while waiting
        return tree

    def run(
        self, board: cshogi.Board, rng: np.random.Generator, stop: Callable[[], bool] | None = None
    ) -> Generator[None, None, SearchResult]:
        """Search `board` (not a finished position); yields whenever the leaf batch must be evaluated.
        `stop` (checked between rounds) ends the search early: the move then comes from the visits
        so far, as sequential halving would pick it."""
        tree = self._tree()
        try:
            return (yield from self._run(tree, board, rng, stop))
        finally:
            self._trees.append(tree)

    def _run(
        self, tree: Tree, board: cshogi.Board, rng: np.random.Generator, stop: Callable[[], bool] | None
    ) -> Generator[None, None, SearchResult]:
        p = self.params
        root = 0
        tree.lengths[0] = 0
        if self._simulate(tree, board, 1):
            yield
            self._resolve(tree, 1)
        edges = tree.edges(root)
        n_legal = edges.stop - edges.start
        labels = tree.label[edges].copy()
        if n_legal == 1:  # a forced move: the target is 1 whatever the search finds, so skip it
            only = int(tree.move[edges.start])
            return SearchResult([only], labels, np.ones(1), 0, float(tree.value[root]), [only])
        m = min(p.considered, n_legal)
        logits = tree.logit[edges]
        g = rng.gumbel(size=n_legal) if p.noise else np.zeros(n_legal)
        considered = gumbel.top_k_considered(g, logits, m)
        seq = _schedule(m, p.sims)
        k = 0
        v_root = float(tree.value[root])
        waiting = 0  # leaves of the last round whose network output is not in the tree yet
        while k < len(seq) and not (stop is not None and stop()):
            t = tree
            if waiting:
                count, leaves = tk.resolve_plan_descend(
                    waiting, t.wait_node, t.wait_row, t.wait_slot, t.wait_length, self.batch.policy,
                    self.batch.value, t.label, t.ready, t.logits_out, seq, k, n_legal, t.N, t.W, t.logit,
                    t.prob, v_root, g, considered, p.c_visit, p.c_scale, t.round, t.work, t.size, t.first,
                    t.child, t.value, t.exact, t.move, t.paths, t.path_moves, t.lengths,
                )  # fmt: skip
                self._cache_waiting(t, waiting)
            else:
                count, leaves = tk.plan_and_descend(
                    seq, k, n_legal, t.N, t.W, t.logit, t.prob, v_root, g, considered, p.c_visit, p.c_scale,
                    t.round, t.work, t.size, t.first, t.child, t.value, t.exact, t.move, t.paths,
                    t.path_moves, t.lengths,
                )  # fmt: skip
            waiting = self._simulate(tree, board, leaves)
            if waiting:
                yield
            k += count
        if waiting:
            self._resolve(tree, waiting)
        return _result(tree, root, g, considered, p)


def _result(tree: Tree, root: int, g: np.ndarray, considered: np.ndarray, p: SearchParams) -> SearchResult:
    """The move and policy target from the root's statistics (tree_kernels.root_result: engine.search.gumbel's
    improved_policy and final_move in one compiled call)."""
    edges = tree.edges(root)
    n = edges.stop - edges.start
    v = float(tree.value[root])
    policy = np.empty(n, dtype=np.float64)
    choice = tk.root_result(n, tree.N, tree.W, tree.logit, tree.prob, v, g, considered, p.c_visit, p.c_scale,
                            policy, tree.work)  # fmt: skip
    visits = tree.N[edges]
    total = int(visits.sum())
    value = (v + float(tree.W[edges].sum())) / (1.0 + total)
    moves = tree.move[edges].tolist()
    pv = [moves[choice], *_most_visited_line(tree, int(tree.child[edges.start + choice]))]
    return SearchResult(moves, tree.label[edges].copy(), policy, choice, value, pv, total)


def _most_visited_line(tree: Tree, node: int, max_len: int = 32) -> list[int]:
    """The moves from `node` on, each the most visited reply (the rest of a principal variation)."""
    line: list[int] = []
    while node >= 0 and tree.ready[node] and len(line) < max_len:
        edges = tree.edges(node)
        visits = tree.N[edges]
        if not len(visits) or visits.max() == 0:
            break
        best = edges.start + int(np.argmax(visits))
        line.append(int(tree.move[best]))
        node = int(tree.child[best])
    return line


def _joined(parts: list[np.ndarray], empty: np.ndarray) -> np.ndarray:
    """The parts end to end (most rounds have one or none: no copy then)."""
    if len(parts) > 1:
        return np.concatenate(parts)
    return parts[0] if parts else empty


@functools.cache
def _schedule(m: int, sims: int) -> np.ndarray:
    """gumbel.considered_visits as the kernels' array (a few (m, sims) pairs recur every move; the
    kernels only read it)."""
    return np.array(gumbel.considered_visits(m, sims), dtype=np.int64)


def warm_up(input2: int) -> None:
    """Compile (or load from numba's disk cache) every kernel with the types searches use, so the
    first real search does not pay for it; `input2` is the loaded network's, so cshogi's feature
    set is left as it is."""
    params = SearchParams(sims=8, considered=4)
    search_position(cshogi.Board(), UniformEvaluator(8, input2), params, np.random.default_rng(0),
                    search_type=TreeSearch)  # fmt: skip
