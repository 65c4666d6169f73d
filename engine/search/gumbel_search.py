"""One Gumbel AlphaZero search per move, written as a generator so that many games share network batches.

`GumbelSearch.run(board, rng)` walks the tree and, whenever leaves need the network, fills their
features into a shared `LeafBatch` and yields; the caller evaluates the batch (one call for all
games) and resumes every waiting search. The search is mctx's, simulation for simulation, with one
exact shortcut: simulations whose root action does not depend on earlier results of the same phase
(the first visits, which go to the top of g + logits in order, and every round in which all eligible
actions get visited) descend together, since distinct root actions have disjoint subtrees. That cuts
the sequential steps per move from n + 1 to about half, so fewer parallel games fill a batch.

Leaf values are exact where the rules decide (`engine.core.rules.terminal`: mate, nyugyoku declaration,
repetition, move limit) and where the leaf mate probe (`engine.search.mate.leaf_mate_value`, a mate in
one by default) decides them; only the rest go to the network, through the shared cache
(engine.search.eval_cache).

This object-per-node version is the readable reference: self-play and the USI engine's gumbel mode
run engine.search.gumbel_tree.TreeSearch (flat arrays, numba), which tests hold to the same moves and
policy targets.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import cshogi
import numpy as np

from engine.backends.evaluator import Evaluator
from engine.core.features import alloc_features, fill_features
from engine.core.moves import labels_from_move16
from engine.core.rules import DEFAULT_MAX_MOVES, terminal
from engine.search import gumbel
from engine.search.eval_cache import EvalCache
from engine.search.mate import leaf_mate_value


@dataclass(frozen=True)
class GumbelParams:
    sims: int = 32
    considered: int = 16
    c_visit: float = gumbel.C_VISIT
    c_scale: float = gumbel.C_SCALE
    rescale: bool = gumbel.RESCALE  # sigma of min-max rescaled Q (mctx); False: of Q as it is
    policy_target: str = "improved"  # gumbel.POLICY_TARGETS: the improved policy, or the visit counts
    value_target: str = "policy"  # gumbel.VALUE_TARGETS: the value a search returns (written as eval)
    max_moves: int | None = DEFAULT_MAX_MOVES
    draw_value: float = 0.5  # a draw's value for the side to move at the root (1 - it for the other)
    noise: bool = True  # Gumbel noise at the root (self-play explores; play may turn it off)
    leaf_mate_plies: int = 1  # mate probe at each new leaf (engine.search.mate.leaf_mate_value)
    root_lines: bool = False  # the fast search records each root move's visits, value and line (MultiPV)

    def __post_init__(self) -> None:
        if self.policy_target not in gumbel.POLICY_TARGETS:
            raise ValueError(
                f"policy_target must be one of {gumbel.POLICY_TARGETS} (got {self.policy_target!r})"
            )
        if self.value_target not in gumbel.VALUE_TARGETS:
            raise ValueError(
                f"value_target must be one of {gumbel.VALUE_TARGETS} (got {self.value_target!r})"
            )


class LeafBatch:
    """The rows of one network call: features written in place, one row per distinct position."""

    def __init__(
        self, capacity: int, planes2: int, buffers: tuple[np.ndarray, np.ndarray] | None = None
    ) -> None:
        """`buffers`: rows to write the features into (an evaluator's, lent by its `input_buffers`)."""
        self.x1, self.x2 = buffers if buffers is not None else alloc_features(capacity, planes2)
        self._rows: dict[int, int] = {}
        self.n = 0
        self.policy: np.ndarray | None = None
        self.value: np.ndarray | None = None

    def add(self, board: cshogi.Board, key: int) -> int:
        row = self._rows.get(key)
        if row is None:
            if self.n == len(self.x1):
                raise RuntimeError(f"leaf batch full ({self.n} rows)")
            row = self.n
            fill_features(board, self.x1[row], self.x2[row])
            self._rows[key] = row
            self.n += 1
        return row

    def clear(self) -> None:
        self._rows.clear()
        self.n = 0


class GumbelNode:
    """A position in the tree. `exact` is set for positions the rules (or the leaf mate probe) decide;
    otherwise the legal moves carry prior logits and per-action visits child_n and value sums child_w
    (from this node's side to move), as engine.search.puct.PuctNode."""

    __slots__ = ("key", "moves", "labels", "logits", "priors", "value", "exact", "children", "child_n",
                 "child_w", "row")  # fmt: skip

    def __init__(self, key: int) -> None:
        self.key = key
        self.exact: float | None = None
        self.logits: np.ndarray | None = None
        self.row = -1

    def expand(self, board: cshogi.Board) -> None:
        self.moves = list(board.legal_moves)
        self.labels = labels_from_move16(np.array(self.moves, dtype=np.int64), board.turn)
        self.children: list[GumbelNode | None] = [None] * len(self.moves)
        self.child_n = np.zeros(len(self.moves), dtype=np.int64)
        self.child_w = np.zeros(len(self.moves), dtype=np.float64)

    def set_prior(self, logits: np.ndarray, value: float) -> None:
        self.logits = logits.astype(np.float64)
        self.priors = gumbel.softmax(self.logits)
        self.value = value

    def q(self) -> np.ndarray:
        return self.child_w / np.maximum(self.child_n, 1)

    def q_hat(self, rescale: bool = True) -> np.ndarray:
        """Completed Q, transformed (gumbel.transform_q): the input of sigma for both root and
        interior choices."""
        return gumbel.transform_q(
            gumbel.completed_q(self.q(), self.child_n, self.priors, self.value), rescale
        )


@dataclass
class GumbelResult:
    """A finished search: legal moves, the improved policy over them, the chosen index, root value."""

    moves: list[int]
    labels: np.ndarray
    policy: np.ndarray
    choice: int
    value: float
    pv: list[int] = field(default_factory=list)  # the chosen move, then the most visited replies
    simulations: int = 0  # visits the root's actions received
    # with GumbelParams.root_lines (gumbel_tree only): per legal move its visits and mean value (the
    # root side's view), and for each visited move the most visited replies after it
    visits: np.ndarray | None = None
    q: np.ndarray | None = None
    lines: dict[int, list[int]] = field(default_factory=dict)


def root_targets(
    params: GumbelParams, improved: np.ndarray, q: np.ndarray, visits: np.ndarray, probs: np.ndarray,
    v_net: float, choice: int,
) -> tuple[np.ndarray, float]:  # fmt: skip
    """The policy and value targets `params` asks for, from the root's statistics (both searches)."""
    by_visits = params.policy_target == "visits" and np.asarray(visits).any()  # not a search stopped at once
    policy = gumbel.visit_policy(visits) if by_visits else improved
    return policy, gumbel.root_value(params.value_target, q, visits, probs, v_net, improved, choice)


Pending = tuple[list[tuple[GumbelNode, int]], GumbelNode]


def _backup(path: list[tuple[GumbelNode, int]], value: float) -> None:
    """Add a leaf value (leaf's side to move) to every action on the path, each from its mover's view."""
    for node, a in reversed(path):
        value = 1.0 - value
        node.child_n[a] += 1
        node.child_w[a] += value


class GumbelSearch:
    """Gumbel AlphaZero search over one board, sharing a cache and a leaf batch with other searches."""

    def __init__(self, params: GumbelParams, cache: EvalCache, batch: LeafBatch) -> None:
        self.params = params
        self.cache = cache
        self.batch = batch

    def _draw_value(self, turn: int, root_turn: int) -> float:
        return self.params.draw_value if turn == root_turn else 1.0 - self.params.draw_value

    def _sigma(self, node: GumbelNode, q_hat: np.ndarray) -> np.ndarray:
        return gumbel.sigma(q_hat, int(node.child_n.max()), self.params.c_visit, self.params.c_scale)

    def _new_node(self, board: cshogi.Board, root_turn: int, root: bool = False) -> GumbelNode:
        node = GumbelNode(board.zobrist_hash())
        if not root:
            end = terminal(board, self.params.max_moves)
            if end is not None:
                node.exact = end.value(board.turn, self._draw_value(board.turn, root_turn))
                return node
            node.exact = leaf_mate_value(board, self.params.leaf_mate_plies)
            if node.exact is not None:
                return node
        node.expand(board)
        cached = self.cache.get(node.key)
        if cached is not None:
            node.set_prior(cached.logits, cached.value)
        else:
            node.row = self.batch.add(board, node.key)
        return node

    def _resolve(self, pending: list[Pending]) -> None:
        """Give waiting leaves their network output (from the evaluated batch) and back it up."""
        policy, value = self.batch.policy, self.batch.value
        for path, leaf in pending:
            if leaf.logits is None:
                logits = policy[leaf.row, leaf.labels]
                v = float(value[leaf.row])
                self.cache.put(leaf.key, np.array(leaf.moves, dtype=np.int32), logits, v)
                leaf.set_prior(logits, v)
            if path:
                _backup(path, leaf.value)

    def _interior_action(self, node: GumbelNode) -> int:
        if not node.child_n.any():  # every q-hat is 0: the choice is the prior's argmax (mctx's formula)
            return int(np.argmax(node.logits))
        return gumbel.select_interior(
            node.logits, self._sigma(node, node.q_hat(self.params.rescale)), node.child_n
        )

    def _simulate(self, board: cshogi.Board, root: GumbelNode, action: int) -> Pending | None:
        """Descend from the root through `action`; back up at once unless the leaf needs the network."""
        path = [(root, action)]
        root_turn = board.turn
        board.push(root.moves[action])
        node = root.children[action]
        while node is not None and node.exact is None:
            b = self._interior_action(node)
            path.append((node, b))
            board.push(node.moves[b])
            node = node.children[b]
        if node is None:
            node = self._new_node(board, root_turn)
            parent, a = path[-1]
            parent.children[a] = node
        for _ in path:
            board.pop()
        if node.exact is not None:
            _backup(path, node.exact)
            return None
        if node.logits is not None:
            _backup(path, node.value)
            return None
        return path, node

    def _round(
        self, root: GumbelNode, seq: list[int], k: int, gumbel_noise: np.ndarray, considered: np.ndarray
    ):
        """The root actions of the next simulations that can run together (see the module docstring)."""
        target = seq[k]
        run = 1
        while k + run < len(seq) and seq[k + run] == target:
            run += 1
        eligible = np.flatnonzero(considered & (root.child_n == target))
        if target == 0:  # unvisited actions share one completed Q, so they go in g + logits order
            order = np.argsort(-(gumbel_noise[eligible] + root.logits[eligible]), kind="stable")
            return eligible[order[:run]].tolist()
        if len(eligible) == run:
            return eligible.tolist()
        sig = self._sigma(root, root.q_hat(self.params.rescale))
        return [gumbel.select_root(gumbel_noise, root.logits, sig, root.child_n, considered, target)]

    def run(
        self, board: cshogi.Board, rng: np.random.Generator, stop: Callable[[], bool] | None = None
    ) -> Generator[None, None, GumbelResult]:
        """Search `board` (not a finished position); yields whenever the leaf batch must be evaluated.
        `stop` (checked between rounds) ends the search early: the move then comes from the visits
        so far, as sequential halving would pick it."""
        root = self._new_node(board, board.turn, root=True)
        if root.logits is None:
            yield
            self._resolve([([], root)])
        n_legal = len(root.moves)
        if n_legal == 1:  # a forced move: the target is 1 whatever the search finds, so skip it
            return GumbelResult(root.moves, root.labels, np.ones(1), 0, root.value)
        m = min(self.params.considered, n_legal)
        g = rng.gumbel(size=n_legal) if self.params.noise else np.zeros(n_legal)
        considered = gumbel.top_k_considered(g, root.logits, m)
        seq = gumbel.considered_visits(m, self.params.sims)
        k = 0
        while k < len(seq) and not (stop is not None and stop()):
            actions = self._round(root, seq, k, g, considered)
            pending = [p for a in actions if (p := self._simulate(board, root, a)) is not None]
            if pending:
                yield
                self._resolve(pending)
            k += len(actions)
        p = self.params
        q_hat = root.q_hat(p.rescale)
        max_n = int(root.child_n.max())
        choice = gumbel.final_move(g, root.logits, self._sigma(root, q_hat), root.child_n, considered)
        improved = gumbel.improved_policy(root.logits, q_hat, max_n, p.c_visit, p.c_scale)
        policy, value = root_targets(p, improved, root.q(), root.child_n, root.priors, root.value, choice)
        return GumbelResult(root.moves, root.labels, policy, choice, value)


class ReferenceGroup:
    """gumbel_tree.SearchGroup's interface over one `run` generator per game of this reference: the
    self-play that tests hold the fast group to (each generator resolves its leaves when resumed)."""

    def __init__(self, params: GumbelParams, cache: EvalCache, batch: LeafBatch, trees: int) -> None:
        self.search = GumbelSearch(params, cache, batch)
        self.runs: list[Generator[None, None, GumbelResult] | None] = [None] * trees
        self.results: dict[int, GumbelResult] = {}

    def start(self, t: int, board: cshogi.Board, rng: np.random.Generator) -> GumbelResult | None:
        self.runs[t] = self.search.run(board, rng)
        return self._resume(t)

    def _resume(self, t: int) -> GumbelResult | None:
        try:
            next(self.runs[t])
            return None
        except StopIteration as done:
            self.runs[t] = None
            return done.value

    def resolve(self) -> None:
        for t, run in enumerate(self.runs):
            if run is not None and (result := self._resume(t)) is not None:
                self.results[t] = result

    def ended(self, stop: bool = False) -> list[tuple[int, GumbelResult]]:
        out = sorted(self.results.items())
        self.results.clear()
        return out

    def descend(self) -> bool:
        return False  # each generator walked its leaves when resumed


def search_position(
    board: cshogi.Board,
    evaluator: Evaluator,
    params: GumbelParams,
    rng: np.random.Generator,
    cache: EvalCache | None = None,
    search_type: type = GumbelSearch,
    stop: Callable[[], bool] | None = None,
) -> GumbelResult:
    """One search on its own, each leaf batch evaluated as it comes (for tests and single-board
    callers); `search_type` is this reference or engine.search.gumbel_tree.TreeSearch (same interface)."""
    batch = LeafBatch(max(params.considered, 1) + 1, evaluator.input2)
    search = search_type(params, cache if cache is not None else EvalCache(1 << 16), batch)
    steps = search.run(board, rng, stop)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        batch.policy, batch.value = evaluator.evaluate_features(batch.x1[: batch.n], batch.x2[: batch.n])
        batch.clear()
