"""The fast Gumbel AlphaZero search: gumbel_search's algorithm, simulation for simulation, over
flat-array trees with numba kernels (tree_kernels) instead of per-node objects.

gumbel_search stays the readable reference; tests hold this one to the same chosen moves and policy
targets. `SearchGroup` advances the searches of many games in lockstep (a self-play group): each
round is one compiled call that backs up every tree's evaluated leaves, one that plans and descends
every tree, and one that creates the new leaves, whatever the number of games. What is left in
Python per leaf is the board walk (push/pop), the rules' terminal checks, one cache lookup and, for a
new position, legal-move generation and its features. `TreeSearch` is one search on its own (the
reference's interface: `run(board, rng)` yields whenever the leaf batch must be evaluated), for the
USI engine's gumbel mode.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator

import cshogi
import numpy as np

from engine.backends.evaluator import UniformEvaluator
from engine.core.moves import MAX_LEGAL_MOVES, label_table
from engine.core.rules import terminal_and_moves
from engine.search import gumbel
from engine.search import tree_kernels as tk
from engine.search.eval_cache import EvalCache
from engine.search.gumbel_search import GumbelParams, GumbelResult, LeafBatch, root_targets, search_position
from engine.search.mate import leaf_mate_value

_NO_LOGITS = np.empty(0, dtype=np.float32)
_NO_MOVES = np.empty(0, dtype=np.int32)
_EDGE_ARRAYS = ("child", "N", "W", "logit", "prob", "move", "label")
FREE, ROOT, SEARCHING = 0, 1, 2  # a tree's state: no search, its root waits on the network, rounds


class Forest:
    """Preallocated arrays for `trees` searches of at most `max_nodes` nodes each (row t of every
    array is tree t; see tree_kernels for one tree's layout). The edge arrays start at room for 128
    legal moves a node and double when a search needs more. `slots` leaves of a round can wait on
    the network at once per tree: their nodes, batch rows and paths (paths[t, slot, :length]) are kept
    here until the batch is evaluated. Each tree's search state (schedule, Gumbel noise, considered
    actions) sits beside it."""

    def __init__(self, trees: int, max_nodes: int, slots: int, sims: int) -> None:
        edges = max_nodes * 128
        self.first = np.zeros((trees, max_nodes + 1), dtype=np.int32)
        self.value = np.zeros((trees, max_nodes), dtype=np.float64)  # the network's or the exact value
        self.exact = np.zeros((trees, max_nodes), dtype=np.bool_)
        self.ready = np.zeros((trees, max_nodes), dtype=np.bool_)  # has its priors (exact nodes never do)
        self.child = np.empty((trees, edges), dtype=np.int32)
        self.N = np.empty((trees, edges), dtype=np.int32)
        self.W = np.empty((trees, edges), dtype=np.float64)
        self.logit = np.empty((trees, edges), dtype=np.float64)
        self.prob = np.empty((trees, edges), dtype=np.float64)
        self.move = np.empty((trees, edges), dtype=np.int32)
        self.label = np.empty((trees, edges), dtype=np.int64)
        self.size = np.zeros(trees, dtype=np.int64)
        self.paths = np.empty((trees, slots, max_nodes + 1), dtype=np.int64)
        self.path_moves = np.empty((trees, slots, max_nodes + 1), dtype=np.int64)
        self.lengths = np.empty((trees, slots), dtype=np.int64)
        self.leaves = np.zeros(trees, dtype=np.int64)  # new leaves of each tree's round
        self.kinds = np.empty((trees, slots), dtype=np.int8)  # per new leaf: see tree_kernels.create_leaves
        self.leaf_value = np.empty((trees, slots), dtype=np.float64)
        self.leaf_count = np.empty((trees, slots), dtype=np.int64)
        self.waiting = np.zeros(trees, dtype=np.int64)
        self.wait_node = np.empty((trees, slots), dtype=np.int64)
        self.wait_row = np.empty((trees, slots), dtype=np.int64)
        self.wait_slot = np.empty((trees, slots), dtype=np.int64)
        self.wait_length = np.empty((trees, slots), dtype=np.int64)
        self.turn = np.zeros(trees, dtype=np.int64)  # the side to move at the root
        self.seq = np.zeros((trees, max(sims, 1)), dtype=np.int64)  # considered-visit schedule
        self.seq_len = np.zeros(trees, dtype=np.int64)
        self.k = np.zeros(trees, dtype=np.int64)  # simulations planned so far
        self.n_legal = np.zeros(trees, dtype=np.int64)
        self.g = np.zeros((trees, MAX_LEGAL_MOVES), dtype=np.float64)
        self.considered = np.zeros((trees, MAX_LEGAL_MOVES), dtype=np.bool_)
        self.round = np.empty(MAX_LEGAL_MOVES, dtype=np.int64)  # kernels' scratch
        self.work = np.empty(MAX_LEGAL_MOVES, dtype=np.float64)
        self.logits_out = np.empty(trees * slots * MAX_LEGAL_MOVES, dtype=np.float32)

    def edges(self, t: int, node: int) -> slice:
        return slice(int(self.first[t, node]), int(self.first[t, node + 1]))

    def grow_edges(self, need: int) -> None:
        """Room for at least `need` edges in every tree."""
        for name in _EDGE_ARRAYS:
            old = getattr(self, name)
            new = np.empty((len(old), max(2 * old.shape[1], need)), dtype=old.dtype)
            new[:, : old.shape[1]] = old
            setattr(self, name, new)


class SearchGroup:
    """The Gumbel searches of up to `trees` games sharing one cache and one leaf batch, advanced in
    lockstep. Per round: `resolve()` backs up the evaluated batch, `ended()` returns the searches
    that are over, `start()` begins new ones, `descend()` plans the next simulations of every search
    not waiting on the network and puts their new leaves in the batch, which the caller evaluates
    (while `descend()` reports searches whose round needed no network call, the caller goes round
    again without one: ended, start, descend)."""

    def __init__(self, params: GumbelParams, cache: EvalCache, batch: LeafBatch, trees: int) -> None:
        self.params = params
        self.cache = cache
        self.batch = batch
        self.forest = Forest(trees, params.sims + 2, params.considered + 1, params.sims)
        self.state = [FREE] * trees
        self.boards: list[cshogi.Board | None] = [None] * trees
        self.rngs: list[np.random.Generator | None] = [None] * trees
        self.entries: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(trees)]  # waiting (key, moves)
        self._table = label_table()

    def start(self, t: int, board: cshogi.Board, rng: np.random.Generator) -> GumbelResult | None:
        """Begin searching `board` (not a finished position) in tree t; the result at once if the
        search needs nothing more (a forced move whose position the cache knows)."""
        f = self.forest
        f.size[t] = 0
        f.first[t, 0] = 0
        f.turn[t] = board.turn
        f.lengths[t, 0] = 0
        f.leaves[t] = 1
        self.boards[t], self.rngs[t] = board, rng
        self.entries[t].clear()
        self._walk([t])
        if f.waiting[t]:
            self.state[t] = ROOT
            return None
        return self._begin(t, False)

    def _begin(self, t: int, stop: bool) -> GumbelResult | None:
        """The root is evaluated: draw the Gumbel noise and the considered actions, as the reference
        does; a forced move (or a search stopped at once) ends here."""
        f, p = self.forest, self.params
        n_legal = int(f.first[t, 1] - f.first[t, 0])
        if n_legal == 1:  # a forced move: the target is 1 whatever the search finds, so skip it
            self.state[t] = FREE
            only = int(f.move[t, 0])
            return GumbelResult([only], f.label[t, :1].copy(), np.ones(1), 0, float(f.value[t, 0]), [only])
        m = min(p.considered, n_legal)
        g = self.rngs[t].gumbel(size=n_legal) if p.noise else np.zeros(n_legal)
        f.g[t, :n_legal] = g
        f.considered[t, :n_legal] = gumbel.top_k_considered(g, f.logit[t, :n_legal], m)
        seq = _schedule(m, p.sims)
        f.seq[t, : len(seq)] = seq
        f.seq_len[t], f.k[t], f.n_legal[t] = len(seq), 0, n_legal
        self.state[t] = SEARCHING
        return self._finish(t) if stop or not len(seq) else None

    def resolve(self) -> None:
        """After the batch's evaluation: back up every waiting leaf and cache it."""
        f = self.forest
        waiting = [t for t in range(len(self.state)) if f.waiting[t]]
        if not waiting:
            return
        trees = np.array(waiting, dtype=np.int64)
        tk.resolve_all(
            trees, f.waiting, f.wait_node, f.wait_row, f.wait_slot, f.wait_length, f.paths,
            self.batch.policy, self.batch.value, f.first, f.label, f.logit, f.prob, f.value, f.ready, f.N,
            f.W, f.logits_out,
        )  # fmt: skip
        entries = [e for t in waiting for e in self.entries[t]]
        rows = np.concatenate([f.wait_row[t, : f.waiting[t]] for t in waiting])
        self.cache.put_many(entries, f.logits_out, self.batch.value[rows].tolist())
        for t in waiting:
            self.entries[t].clear()
        f.waiting[trees] = 0

    def ended(self, stop: bool = False) -> list[tuple[int, GumbelResult]]:
        """(tree, result) of the searches not waiting on the network that are over: their budget is
        spent, or `stop` (the move then comes from the visits so far, as sequential halving would
        pick it). A search whose root was just evaluated begins here (and a forced move ends)."""
        f = self.forest
        out = []
        for t, state in enumerate(self.state):
            if f.waiting[t]:
                continue
            if state == ROOT:
                result = self._begin(t, stop)
            elif state == SEARCHING and (stop or f.k[t] >= f.seq_len[t]):
                result = self._finish(t)
            else:
                continue
            if result is not None:
                out.append((t, result))
        return out

    def descend(self) -> bool:
        """Plan the next simulations of every running search not waiting on the network and put their
        new leaves in the batch (backed up at once when the rules or the cache decide them). True if
        some search's round needed no network call (it can go on at once)."""
        f = self.forest
        running = [t for t, state in enumerate(self.state) if state == SEARCHING and not f.waiting[t]]
        if not running:
            return False
        p = self.params
        tk.plan_all(
            np.array(running, dtype=np.int64), f.seq, f.seq_len, f.k, f.n_legal, f.N, f.W, f.logit, f.prob,
            f.g, f.considered, p.c_visit, p.c_scale, p.rescale, f.round, f.work, f.size, f.first, f.child,
            f.value, f.exact, f.move, f.paths, f.path_moves, f.lengths, f.leaves,
        )  # fmt: skip
        self._walk([t for t in running if f.leaves[t]])
        return any(not f.waiting[t] for t in running)

    def _walk(self, trees: list[int]) -> None:
        """Create the new leaves of these trees (leaf i of tree t reached by f.path_moves[t, i,
        :f.lengths[t, i]]; length 0: the root itself). A position the rules decide or the cache knows
        is backed up at once; the others wait on rows of the leaf batch (f.waiting[t] of them)."""
        if not trees:
            return
        f, p = self.forest, self.params
        get, add = self.cache.get, self.batch.add
        move_parts: list[np.ndarray] = []
        logit_parts: list[np.ndarray] = []
        need = 0
        for t in trees:
            board, root_turn, leaves = self.boards[t], int(f.turn[t]), int(f.leaves[t])
            push, pop = board.push, board.pop
            kinds, values, counts = f.kinds[t], f.leaf_value[t], f.leaf_count[t]
            entries = self.entries[t]
            size = int(f.size[t])
            waiting = 0
            moves_before = len(move_parts)
            lengths = f.lengths[t, :leaves].tolist()
            for i, line in enumerate(f.path_moves[t, :leaves].tolist()):
                length = lengths[i]
                line = line[:length]
                for m in line:
                    push(m)
                if length:
                    end, legal = terminal_and_moves(board, p.max_moves)
                    if end is not None:
                        turn = board.turn
                        exact = end.value(turn, p.draw_value if turn == root_turn else 1.0 - p.draw_value)
                    else:
                        exact = leaf_mate_value(board, p.leaf_mate_plies)
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
                        f.wait_node[t, waiting] = size + i
                        f.wait_row[t, waiting] = add(board, key)
                        f.wait_slot[t, waiting] = i
                        f.wait_length[t, waiting] = length
                        entries.append((key, moves))
                        waiting += 1
                    counts[i] = len(moves)
                    move_parts.append(moves)
                for _ in line:
                    pop()
            f.waiting[t] = waiting
            new_edges = sum([len(m) for m in move_parts[moves_before:]])
            need = max(need, int(f.first[t, size]) + new_edges)
        if need > f.move.shape[1]:
            f.grow_edges(need)
        tk.create_all(
            np.array(trees, dtype=np.int64), f.leaves, f.size, f.turn, f.kinds, f.leaf_value, f.leaf_count,
            _joined(move_parts, _NO_MOVES), _joined(logit_parts, _NO_LOGITS), self._table, f.lengths, f.first,
            f.child, f.N, f.W, f.move, f.label, f.logit, f.prob, f.value, f.ready, f.exact, f.paths,
        )  # fmt: skip

    def _finish(self, t: int) -> GumbelResult:
        """The move and policy target from the root's statistics (tree_kernels.root_result: gumbel's
        improved_policy and final_move in one compiled call)."""
        f, p = self.forest, self.params
        self.state[t] = FREE
        n = int(f.n_legal[t])
        v = float(f.value[t, 0])
        N, W = f.N[t], f.W[t]
        improved = np.empty(n, dtype=np.float64)
        choice = tk.root_result(
            n, N, W, f.logit[t], f.prob[t], v, f.g[t], f.considered[t], p.c_visit, p.c_scale, p.rescale,
            improved, f.work,
        )  # fmt: skip
        total = int(N[:n].sum())
        q = W[:n] / np.maximum(N[:n], 1)
        policy, value = root_targets(p, improved, q, N[:n], f.prob[t, :n], v, choice)
        moves = f.move[t, :n].tolist()
        pv = [moves[choice], *self._most_visited_line(t, int(f.child[t, choice]))]
        result = GumbelResult(moves, f.label[t, :n].copy(), policy, choice, value, pv, total)
        if p.root_lines:  # MultiPV: what the engine reports beside its move
            result.visits = N[:n].copy()
            result.q = q
            for a in np.flatnonzero(result.visits).tolist():
                result.lines[a] = self._most_visited_line(t, int(f.child[t, a]))
        return result

    def _most_visited_line(self, t: int, node: int, max_len: int = 32) -> list[int]:
        """The moves from `node` on, each the most visited reply (the rest of a principal variation)."""
        f = self.forest
        line: list[int] = []
        while node >= 0 and f.ready[t, node] and len(line) < max_len:
            edges = f.edges(t, node)
            visits = f.N[t, edges]
            if not len(visits) or visits.max() == 0:
                break
            best = edges.start + int(np.argmax(visits))
            line.append(int(f.move[t, best]))
            node = int(f.child[t, best])
        return line


class TreeSearch:
    """One Gumbel search at a time over a one-tree SearchGroup, with the reference's interface (the
    USI engine's gumbel mode, single-board callers)."""

    def __init__(self, params: GumbelParams, cache: EvalCache, batch: LeafBatch) -> None:
        self.group = SearchGroup(params, cache, batch, 1)

    def run(
        self, board: cshogi.Board, rng: np.random.Generator, stop: Callable[[], bool] | None = None
    ) -> Generator[None, None, GumbelResult]:
        """Search `board` (not a finished position); yields whenever the leaf batch must be evaluated.
        `stop` (checked between rounds) ends the search early: the move then comes from the visits
        so far, as sequential halving would pick it."""
        group = self.group
        group.forest.waiting[0] = 0  # left by a search stopped while waiting
        result = group.start(0, board, rng)
        while result is None:
            stopping = stop is not None and stop()
            if not stopping:
                group.descend()
            if group.forest.waiting[0]:
                yield
                group.resolve()
            ended = group.ended(stopping)
            result = ended[0][1] if ended else None
        return result


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
    params = GumbelParams(sims=8, considered=4)
    search_position(cshogi.Board(), UniformEvaluator(8, input2), params, np.random.default_rng(0),
                    search_type=TreeSearch)  # fmt: skip
