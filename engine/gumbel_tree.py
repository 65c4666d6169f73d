"""The fast Gumbel AlphaZero search: engine.gumbel_search's algorithm, simulation for simulation, over a
flat-array tree with numba kernels (engine.tree_kernels) instead of per-node objects.

engine.gumbel_search stays the readable reference; tests hold this one to the same chosen moves and
policy targets. Per simulation the work left in Python is the board walk (push/pop), the rules'
terminal checks, one cache lookup and, for a new position, legal-move generation and its features.
The interface is the reference's: `run(board, rng)` yields whenever the shared `LeafBatch` must be
evaluated, so many games share one network call.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import cshogi
import numpy as np

from engine import gumbel
from engine import tree_kernels as tk
from engine.eval_cache import EvalCache
from engine.evaluator import UniformEvaluator
from engine.gumbel_search import LeafBatch, SearchParams, SearchResult, search_position
from engine.moves import label_table
from engine.rules import terminal

MAX_LEGAL_MOVES = 593  # the most legal moves a shogi position can have
_NO_LOGITS = np.empty(0, dtype=np.float32)


_EDGE_ARRAYS = ("child", "N", "W", "logit", "prob", "move", "label")


class Tree:
    """Preallocated arrays for one search of at most `max_nodes` nodes (see engine.tree_kernels);
    the edge arrays start at room for 128 legal moves a node and double when a search needs more."""

    def __init__(self, max_nodes: int) -> None:
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
        self.path = np.empty(max_nodes + 1, dtype=np.int64)
        self.path_moves = np.empty(max_nodes + 1, dtype=np.int64)
        self.work = np.empty(MAX_LEGAL_MOVES, dtype=np.float64)
        self.round = np.empty(MAX_LEGAL_MOVES, dtype=np.int64)
        self.size = 0

    def edges(self, node: int) -> slice:
        return slice(int(self.first[node]), int(self.first[node + 1]))

    def reserve_edges(self, node: int, n: int) -> None:
        """Room for `node` (the last created) to get n edges."""
        need = int(self.first[node]) + n
        if need > len(self.move):
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

    def _leaf(self, tree: Tree, board: cshogi.Board, root_turn: int, length: int) -> tuple | None:
        """Create the next node for `board`, reached by tree.path[:length] (length 0: the root). A
        position the rules decide or the cache knows is backed up at once (None); otherwise returns
        (path, length, node, key, moves, row): it waits on row `row` of the leaf batch."""
        t = tree
        node = t.size
        t.size += 1
        if length:
            exact = self._exact_value(board, root_turn)
            if exact is not None:
                tk.set_exact(node, exact, t.first, t.value, t.exact, t.ready, t.path, length, t.N, t.W)
                return None
        key = board.zobrist_hash()
        cached = self.cache.get(key)
        if cached is not None:
            moves, logits, v = cached
        else:
            moves, logits, v = np.fromiter(board.legal_moves, dtype=np.int32), _NO_LOGITS, 0.0
        t.reserve_edges(node, len(moves))
        tk.expand(
            node, moves, logits, v, board.turn, self._table, t.first, t.child, t.N, t.W, t.move, t.label,
            t.logit, t.prob, t.value, t.ready, t.exact, t.path, length,
        )  # fmt: skip
        if cached is not None:
            return None
        return t.path[:length].copy(), length, node, key, moves, self.batch.add(board, key)

    def _exact_value(self, board: cshogi.Board, root_turn: int) -> float | None:
        p = self.params
        end = terminal(board, p.max_moves)
        if end is not None:
            return end.value(board.turn, p.draw_value if board.turn == root_turn else 1.0 - p.draw_value)
        if not board.is_check() and board.mate_move_in_1ply():
            return 1.0
        return None

    def _resolve(self, tree: Tree, pending: list[tuple]) -> None:
        """Give waiting leaves their network output (from the evaluated batch) and back it up."""
        policy, value = self.batch.policy, self.batch.value
        t = tree
        for path, length, node, key, moves, row in pending:
            v = float(value[row])
            logits = tk.resolve(
                node, row, policy, v, t.first, t.label, t.logit, t.prob, t.value, t.ready, path, length, t.N,
                t.W,
            )  # fmt: skip
            self.cache.put(key, moves, logits, v)

    def _simulate(self, tree: Tree, board: cshogi.Board, action: int) -> tuple | None:
        """Descend from the root through `action`; back up at once unless the leaf needs the network."""
        t, p = tree, self.params
        length, node, new = tk.descend(
            action, 0, t.size, t.first, t.child, t.N, t.W, t.logit, t.prob, t.value, t.exact, t.move,
            p.c_visit, p.c_scale, t.path, t.path_moves, t.work,
        )  # fmt: skip
        if not new:  # an exact node, backed up by descend
            return None
        root_turn = board.turn
        for m in t.path_moves[:length].tolist():
            board.push(m)
        leaf = self._leaf(tree, board, root_turn, length)
        for _ in range(length):
            board.pop()
        return leaf

    def _tree(self) -> Tree:
        tree = self._trees.pop() if self._trees else Tree(self.params.sims + 2)
        tree.size = 0
        tree.first[0] = 0
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
        waiting = self._leaf(tree, board, board.turn, 0)
        if waiting is not None:
            yield
            self._resolve(tree, [waiting])
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
        seq = np.array(gumbel.considered_visits(m, p.sims), dtype=np.int64)
        k = 0
        v_root = float(tree.value[root])
        while k < len(seq) and not (stop is not None and stop()):
            count = tk.plan_round(
                seq, k, 0, n_legal, tree.N, tree.W, tree.logit, tree.prob, v_root, g, considered, p.c_visit,
                p.c_scale, tree.round, tree.work,
            )  # fmt: skip
            pending = []
            for a in tree.round[:count].tolist():
                leaf = self._simulate(tree, board, a)
                if leaf is not None:
                    pending.append(leaf)
            if pending:
                yield
                self._resolve(tree, pending)
            k += count
        return _result(tree, root, g, considered, p)


def _result(tree: Tree, root: int, g: np.ndarray, considered: np.ndarray, p: SearchParams) -> SearchResult:
    """The move and policy target from the root's statistics, by engine.gumbel's own functions."""
    edges = tree.edges(root)
    logits, n, w = tree.logit[edges], tree.N[edges].astype(np.int64), tree.W[edges]
    v = float(tree.value[root])
    q_hat = gumbel.rescale_q(gumbel.completed_q(w / np.maximum(n, 1), n, tree.prob[edges], v))
    max_n = int(n.max())
    choice = gumbel.final_move(g, logits, gumbel.sigma(q_hat, max_n, p.c_visit, p.c_scale), n, considered)
    policy = gumbel.improved_policy(logits, q_hat, max_n, p.c_visit, p.c_scale)
    value = (v + float(w.sum())) / (1.0 + float(n.sum()))
    moves = tree.move[edges].tolist()
    pv = [moves[choice], *_most_visited_line(tree, int(tree.child[edges.start + choice]))]
    return SearchResult(moves, tree.label[edges].copy(), policy, choice, value, pv, int(n.sum()))


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


def warm_up(input2: int) -> None:
    """Compile (or load from numba's disk cache) every kernel with the types searches use, so the
    first real search does not pay for it; `input2` is the loaded network's, so cshogi's feature
    set is left as it is."""
    params = SearchParams(sims=8, considered=4)
    search_position(cshogi.Board(), UniformEvaluator(8, input2), params, np.random.default_rng(0),
                    search_type=TreeSearch)  # fmt: skip
