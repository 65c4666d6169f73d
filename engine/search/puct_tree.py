"""The fast PUCT search: engine.search.puct.Search's algorithm over a flat-array tree, each playout's descent
(selection, virtual loss, backup of exact leaves, collisions) one numba call (engine.search.puct_kernels).

engine.search.puct.Search stays the readable reference; this class inherits its control logic (run, stop
rules, best move, PV, result) and replaces only the tree: `NodeView` gives those methods the
reference's node attributes as slices of the flat arrays. Tests hold it to the reference's visit
counts at batch 1. Python is left with the board walk to a new leaf, the rules' checks, the cache and
features. Reusing a subtree for the next position copies it into fresh arrays (the rest is dropped).
"""

from __future__ import annotations

from collections.abc import Sequence

import cshogi
import numpy as np

from engine.backends.evaluator import Evaluator, UniformEvaluator
from engine.core.features import fill_features
from engine.core.moves import MAX_LEGAL_MOVES, label_table, legal_moves_and_labels
from engine.search import puct_kernels as tk
from engine.search.control import SearchControl
from engine.search.puct import PuctParams, Search

INITIAL_NODES, INITIAL_EDGES = 1 << 12, 1 << 18  # array sizes of a new tree (they double as needed)
_NODE_FIELDS = (
    ("first", np.int64), ("count", np.int32), ("state", np.int8), ("pending", np.bool_),
    ("win_idx", np.int32), ("nn", np.int32), ("nw", np.float64), ("value", np.float64),
)  # fmt: skip
_EDGE_FIELDS = (
    ("child", np.int32), ("cn", np.int32), ("cw", np.float64), ("prior", np.float64), ("move", np.int32),
)  # fmt: skip


class Tree:
    """Node and edge arrays that grow by doubling; size[0] nodes and edges[0] edges are in use."""

    def __init__(self, nodes: int | None = None, edges: int | None = None) -> None:
        nodes, edges = nodes or INITIAL_NODES, edges or INITIAL_EDGES
        for name, dtype in _NODE_FIELDS:
            setattr(self, name, np.zeros(nodes, dtype=dtype))
        for name, dtype in _EDGE_FIELDS:
            setattr(self, name, np.zeros(edges, dtype=dtype))
        self.size = np.zeros(1, dtype=np.int64)
        self.edges = np.zeros(1, dtype=np.int64)

    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(getattr(self, name) for name, _ in _NODE_FIELDS + _EDGE_FIELDS)

    def reserve(self, nodes: int, edges: int) -> None:
        """Room for `nodes` more nodes and `edges` more edges."""
        for fields, used, need in ((_NODE_FIELDS, self.size, nodes), (_EDGE_FIELDS, self.edges, edges)):
            have = len(getattr(self, fields[0][0]))
            if used[0] + need > have:
                grown = max(2 * have, int(used[0]) + need)
                for name, _ in fields:
                    old = getattr(self, name)
                    new = np.zeros(grown, dtype=old.dtype)
                    new[: len(old)] = old
                    setattr(self, name, new)

    def new_node(self) -> int:
        self.reserve(1, 0)
        node = int(self.size[0])
        self.size[0] += 1
        self.state[node], self.pending[node], self.win_idx[node] = tk.UNEVALUATED, False, -1
        self.nn[node], self.nw[node], self.value[node], self.count[node] = 0, 0.0, 0.5, 0
        return node

    def edge_slice(self, node: int) -> slice:
        f = int(self.first[node])
        return slice(f, f + int(self.count[node]))


class NodeView:
    """A node seen through the reference's attributes (engine.search.puct.Node), for the inherited methods."""

    __slots__ = ("tree", "index")

    def __init__(self, tree: Tree, index: int) -> None:
        self.tree, self.index = tree, index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodeView) and other.tree is self.tree and other.index == self.index

    __hash__ = None  # type: ignore[assignment]

    @property
    def moves(self) -> np.ndarray | None:
        t = self.tree
        return t.move[t.edge_slice(self.index)] if t.state[self.index] == tk.EXPANDED else None

    @property
    def child_n(self) -> np.ndarray:
        return self.tree.cn[self.tree.edge_slice(self.index)]

    @property
    def child_w(self) -> np.ndarray:
        return self.tree.cw[self.tree.edge_slice(self.index)]

    @property
    def priors(self) -> np.ndarray:
        return self.tree.prior[self.tree.edge_slice(self.index)]

    @property
    def children(self) -> list[NodeView | None]:
        t = self.tree
        return [NodeView(t, int(c)) if c >= 0 else None for c in t.child[t.edge_slice(self.index)]]

    @property
    def n(self) -> int:
        return int(self.tree.nn[self.index])

    @property
    def w(self) -> float:
        return float(self.tree.nw[self.index])

    @property
    def value(self) -> float:
        return float(self.tree.value[self.index])

    @property
    def win_idx(self) -> int:
        return int(self.tree.win_idx[self.index])

    @property
    def pending(self) -> bool:
        return bool(self.tree.pending[self.index])

    @property
    def terminal(self) -> float | None:
        return self.value if self.tree.state[self.index] == tk.TERMINAL else None

    def q(self) -> np.ndarray:
        n = self.child_n
        return np.where(n > 0, self.child_w / np.maximum(n, 1), self.value)


class FastSearch(Search):
    """engine.search.puct.Search with the tree in flat arrays; same options, same answers."""

    def __init__(
        self,
        evaluator: Evaluator,
        params: PuctParams | None = None,
        batch_size: int | None = None,
        spares: Sequence[Evaluator] = (),
    ) -> None:
        super().__init__(evaluator, params, batch_size, spares)
        self.tree = Tree()
        self._path_e = self._path_n = self._path_m = np.zeros(0, dtype=np.int64)  # sized by _collect
        self._logits_out = np.zeros(0, dtype=np.float32)  # a batch's legal-move logits (see _expand_batch)
        _warm_up(evaluator.input2)

    def set_position(self, start_sfen: str, moves: list[int], max_reuse_plies: int = 4) -> None:
        old = self.root
        super().set_position(start_sfen, moves, max_reuse_plies)  # walks NodeViews; may keep a subtree
        if self.root is not None and self.root != old:
            self._compact(self.root.index)

    def _compact(self, root: int) -> None:
        t = self.tree
        fresh = Tree(max(int(t.size[0]), 16), max(int(t.edges[0]), 1024))
        nodes, edges = tk.puct_compact(root, *t.arrays(), fresh.arrays())
        fresh.size[0], fresh.edges[0] = nodes, edges
        self.tree = fresh
        self.root = NodeView(fresh, 0)

    def clear(self) -> None:
        super().clear()
        self.tree = Tree()

    def _expand(self, node: int, moves: np.ndarray, logits: np.ndarray, value: float) -> None:
        t = self.tree  # the caller reserved room for the edges
        tk.puct_expand(node, moves, logits, value, self.params.softmax_temperature, t.edges, t.first, t.count,
                       t.state, t.value, t.child, t.cn, t.cw, t.prior, t.move)  # fmt: skip

    def evaluate_root(self) -> NodeView:
        if self.root is None:
            self.tree = Tree()
            self.root = NodeView(self.tree, self.tree.new_node())
            self.nodes = 1
        root = self.root.index
        self.tree.reserve(0, MAX_LEGAL_MOVES)
        if self.tree.state[root] == tk.UNEVALUATED:
            key = self.board.zobrist_hash()
            hit = self.cache.get(key)
            if hit is None:
                moves, labels = legal_moves_and_labels(self.board)
                fill_features(self.board, self.ev.x1[0], self.ev.x2[0])
                policy, value = self.ev.evaluate(1)
                logits, v = policy[0][labels], float(value[0])
                self.cache.put(key, moves, logits, v)
                self._expand(root, moves.astype(np.int32), logits, v)
            else:
                self._expand(root, hit.moves, hit.logits, hit.value)
            t = self.tree
            t.win_idx[root] = self._mate_in_one(t.move[t.first[root] : t.first[root] + t.count[root]])
        return self.root

    def _leaf(self, node: int, parent: int, idx: int, queued: list, length: int) -> bool:
        """A new leaf (the board is at it): exact, cached (True: backed up) or queued for the network."""
        t, board = self.tree, self.board
        path_e, path_n = self._path_e, self._path_n
        exact = self._exact_value()
        if exact is not None:
            t.state[node], t.value[node] = tk.TERMINAL, exact[0]
            if exact[1]:
                t.win_idx[parent] = idx
            tk.puct_backup(path_e, path_n, length, exact[0], t.nw, t.cw)
            return True
        key = board.zobrist_hash()
        hit = self.cache.get(key)
        if hit is not None:
            self._expand(node, hit.moves, hit.logits, hit.value)
            tk.puct_backup(path_e, path_n, length, hit.value, t.nw, t.cw)
            return True
        moves = np.fromiter(board.legal_moves, dtype=np.int32)
        k = len(queued)
        fill_features(board, self.ev.x1[k], self.ev.x2[k])
        t.pending[node] = True
        queued.append((path_e[:length].copy(), path_n[:length].copy(), node, key, moves, board.turn))
        return False

    def _collect(self) -> tuple[list, int]:
        board, p, t = self.board, self.params, self.tree
        c = np.array(
            [p.c_init, p.c_base, p.c_fpu_reduction, p.c_init_root, p.c_base_root, p.c_fpu_reduction_root]
        )
        root = self.root.index
        queued: list = []
        done = collisions = 0
        # every expansion of this batch and of those still in flight (their edges come when they return)
        t.reserve(self.batch_size, len(self.slots) * self.batch_size * MAX_LEGAL_MOVES)
        longest = int(t.size[0]) + self.batch_size + 1  # a path is at most as long as the tree
        if len(self._path_e) < longest:
            self._path_e, self._path_n, self._path_m = np.zeros((3, 2 * longest), dtype=np.int64)
        path_m = self._path_m
        for _ in range(self.batch_size):
            if self.nodes >= p.node_limit:
                break
            status, length, node, parent, idx = tk.puct_descend(
                root, t.size, t.first, t.count, t.state, t.pending, t.win_idx, t.nn, t.nw, t.value, t.child,
                t.cn, t.cw, t.prior, t.move, c, self._path_e, self._path_n, path_m,
            )  # fmt: skip
            if status == tk.DONE:
                done += 1
            elif status == tk.COLLISION:
                collisions += 1
            else:
                self.nodes += 1
                for m in path_m[:length].tolist():
                    board.push(m)
                done += self._leaf(node, parent, idx, queued, length)
                for _ in range(length):
                    board.pop()
            self.seldepth = max(self.seldepth, length)
            if collisions > self.batch_size // 2 + 1:
                break
        return queued, done

    def _expand_batch(self, queued: list, policy: np.ndarray, value: np.ndarray) -> None:
        """Every queued leaf's network output in one compiled call, then into the cache."""
        t = self.tree
        path_e, path_n, nodes, keys, moves, turns = zip(*queued, strict=True)
        move_start = np.zeros(len(queued) + 1, dtype=np.int64)
        np.cumsum([len(m) for m in moves], out=move_start[1:])
        path_start = np.zeros(len(queued) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in path_e], out=path_start[1:])
        if len(self._logits_out) < move_start[-1]:  # reused: the cache copies what it keeps
            self._logits_out = np.empty(int(move_start[-1]), dtype=np.float32)
        logits = self._logits_out
        tk.puct_expand_batch(
            len(queued), np.array(nodes, dtype=np.int64), np.concatenate(moves), move_start,
            np.array(turns, dtype=np.int64), np.concatenate(path_e), np.concatenate(path_n), path_start,
            label_table(), policy, value, self.params.softmax_temperature, t.edges, t.first, t.count, t.state,
            t.value, t.child, t.cn, t.cw, t.prior, t.move, t.pending, t.nw, logits,
        )  # fmt: skip
        self.cache.put_many(list(zip(keys, moves, strict=True)), logits, value[: len(queued)].tolist())


_warm = False


def _warm_up(input2: int) -> None:
    """Compile (or load from numba's disk cache) the kernels once per process, with the types real
    searches use, so the first `go` does not pay for it (USI: at isready). `input2` is the loaded
    network's, so cshogi's feature set is left as it is."""
    global _warm
    if _warm:
        return
    _warm = True
    search = FastSearch(UniformEvaluator(4, input2), PuctParams(), batch_size=4)
    board = cshogi.Board()
    first = next(iter(board.legal_moves))
    for moves in ([], [first]):  # the second position reuses (compacts) the first one's subtree
        search.set_position(cshogi.STARTING_SFEN, moves)
        search.run(SearchControl(max_playouts=12))
