"""Batched PUCT Monte-Carlo tree search for play (dlshogi's UCT search, in Python over numpy arrays).

Each node keeps its children's statistics in small numpy arrays (visits, value sums, priors), so a
selection step is a handful of vector operations. Leaves are collected with virtual loss into one
batch and evaluated by a single `Evaluator.evaluate(n)` call; positions already evaluated come from a
cache keyed by the position hash. Given more than one evaluator, the search keeps a batch in flight
for each (engine.search.inflight). Terminal positions (mate, repetition, nyugyoku, move limit) and
leaves a short mate probe decides get exact values instead of the network's. The tree is walked by
pushing and popping moves on one cshogi Board that holds the game's history, so repetitions before
the root count.

Values are win probabilities. `PuctNode.w` and `child_w` are sums from the point of view of the side to
move at that node (q(a) = the mover's expected result after playing a), as in dlshogi.

This readable version is the reference: engine.search.puct_tree.FastSearch (flat arrays, numba) inherits its
control logic and must reach the same visit counts. `mode="gumbel"` runs self-play's Gumbel search
(engine.search.gumbel_tree) instead of PUCT, with the same network cache (engine.search.eval_cache).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cshogi
import numpy as np

from engine.backends.evaluator import Evaluator, Outputs
from engine.core.features import fill_features
from engine.core.moves import legal_moves_and_labels
from engine.core.rules import terminal
from engine.search import gumbel
from engine.search.control import PuctResult, SearchControl, can_stop_early
from engine.search.eval_cache import EvalCache
from engine.search.gumbel_search import GumbelParams, GumbelResult, search_position
from engine.search.inflight import InFlight
from engine.search.mate import leaf_mate_value

SEARCH_MODES = ("puct", "gumbel", "policy")


@dataclass
class PuctParams:
    """dlshogi's constants (option values divided into real units by the USI layer)."""

    c_init: float = 1.44
    c_base: float = 28288.0
    c_fpu_reduction: float = 0.27
    c_init_root: float = 1.16
    c_base_root: float = 25617.0
    c_fpu_reduction_root: float = 0.0
    softmax_temperature: float = 1.74
    draw_value_black: float = 0.5  # value of a draw for the engine when it plays Black
    draw_value_white: float = 0.5
    repetition_ply: int = 16  # how far back the tree looks for repetitions (cshogi is_draw(ply))
    leaf_mate_plies: int = 5  # mate probe at each new leaf (engine.search.mate.leaf_mate_value)
    max_moves: int | None = None  # game length at which the game is drawn (None: no limit)
    node_limit: int = 2_000_000  # stop growing the tree past this many nodes
    cache_size: int = 1_000_000  # NN results kept by position hash
    mode: str = "puct"  # puct | gumbel (self-play's search: engine.search.gumbel_tree)
    gumbel_considered: int = 16
    gumbel_c_visit: float = gumbel.C_VISIT
    gumbel_c_scale: float = gumbel.C_SCALE
    gumbel_rescale: bool = gumbel.RESCALE
    gumbel_noise: bool = False  # in play the root's Gumbel noise is off unless asked for
    multipv: int = 1  # root moves the engine reports (gumbel mode keeps their lines: GumbelParams.root_lines)


class PuctNode:
    """A position in the tree; children are created on first visit."""

    __slots__ = ("moves", "priors", "child_n", "child_w", "children", "n", "w", "value", "terminal",
                 "pending", "win_idx")  # fmt: skip

    def __init__(self) -> None:
        self.moves: np.ndarray | None = None  # legal moves (cshogi ints); None until evaluated
        self.priors: np.ndarray | None = None
        self.child_n: np.ndarray | None = None
        self.child_w: np.ndarray | None = None
        self.children: list[PuctNode | None] = []
        self.n = 0  # visits through this node to its children (virtual losses included)
        self.w = 0.0
        self.value = 0.5  # the network's (or exact) value for the side to move here
        self.terminal: float | None = None  # exact value when the game is decided here
        self.pending = False  # queued for evaluation in the current batch
        self.win_idx = -1  # a child whose mover is lost (mate / won repetition): play it

    def expand(self, moves: np.ndarray, logits: np.ndarray, value: float, temperature: float) -> None:
        self.moves = moves
        self.priors = gumbel.softmax(logits / temperature)
        self.child_n = np.zeros(len(moves), dtype=np.int32)
        self.child_w = np.zeros(len(moves), dtype=np.float64)
        self.children = [None] * len(moves)
        self.value = value

    def q(self) -> np.ndarray:
        """Mean value of each child for the side to move here; unvisited children get this node's value."""
        n = self.child_n
        return np.where(n > 0, self.child_w / np.maximum(n, 1), self.value)


def puct_select(node: PuctNode, c_init: float, c_base: float, c_fpu_reduction: float) -> int:
    """dlshogi's PUCT: q + c(N) * P * sqrt(N) / (1 + n), unvisited children at the parent's value less
    an FPU reduction that grows with the prior mass already visited."""
    n = node.n
    cn = node.child_n
    visited = cn > 0
    c = c_init + math.log((n + 1 + c_base) / c_base)
    fpu = c_fpu_reduction * math.sqrt(float(node.priors[visited].sum())) if n else 0.0
    parent_q = max(0.0, (node.w / n if n else node.value) - fpu)
    q = np.where(visited, node.child_w / np.maximum(cn, 1), parent_q)
    u = (math.sqrt(n) if n else 1.0) / (1.0 + cn)
    return int(np.argmax(q + c * u * node.priors))


class Search:
    """One search tree, kept between moves so a descendant position reuses its subtree."""

    def __init__(
        self,
        evaluator: Evaluator,
        params: PuctParams | None = None,
        batch_size: int | None = None,
        spares: Sequence[Evaluator] = (),
    ) -> None:
        """`spares`: more evaluators of the same network, each with its own buffers: the search then keeps
        1 + len(spares) batches in flight (engine.search.inflight)."""
        self.slots = [evaluator, *spares]
        if any(e.input2 != evaluator.input2 for e in spares):
            raise ValueError("spare evaluators must run the same network (input2 differs)")
        self.ev = evaluator  # the slot whose buffers the next batch is collected into
        self.params = params or PuctParams()
        self.batch_size = min(batch_size or evaluator.max_batch, *(e.max_batch for e in self.slots))
        self.board = cshogi.Board()
        self.cache = EvalCache(self.params.cache_size)
        self.root: PuctNode | None = None
        self.root_key: tuple[str, tuple[int, ...]] | None = None
        self.nodes = 0
        self.seldepth = 0
        self._root_color = cshogi.BLACK
        self.gumbel_result: GumbelResult | None = None  # the last gumbel-mode search (move, target)
        if self.params.mode == "gumbel":  # compile its kernels now (isready), not in the first move's time
            from engine.search.gumbel_tree import warm_up

            warm_up(evaluator.input2)

    # ----- position and tree reuse -----

    def set_position(self, start_sfen: str, moves: list[int], max_reuse_plies: int = 4) -> None:
        """Set the root to `start_sfen` + `moves`, keeping the subtree if the previous root leads here."""
        self.board.set_sfen(start_sfen)
        for m in moves:
            self.board.push(m)
        key = (start_sfen, tuple(moves))
        self._root_color = self.board.turn
        old, old_key = self.root, self.root_key
        self.root, self.root_key = None, key
        if old is None or old_key is None or old_key[0] != start_sfen:
            return
        prev = old_key[1]
        extra = key[1][len(prev) :]
        if key[1][: len(prev)] != prev or len(extra) > max_reuse_plies:
            return
        node: PuctNode | None = old
        for m in extra:
            if node is None or node.moves is None or node.pending:
                return
            hit = np.flatnonzero(node.moves == m)
            node = node.children[int(hit[0])] if len(hit) else None
        if node is not None and node.moves is not None and not node.pending and node.terminal is None:
            self.root = node
            self.nodes = node.n + 1

    def clear(self) -> None:
        """Forget the tree and the NN cache (a new game)."""
        self.root = self.root_key = None
        self.cache.clear()
        self.nodes = 0

    # ----- evaluation helpers -----

    def _draw_value(self, turn: int) -> float:
        """A draw's value for the side to move `turn`, from the engine's (root side's) setting."""
        p = self.params
        mine = p.draw_value_black if self._root_color == cshogi.BLACK else p.draw_value_white
        return mine if turn == self._root_color else 1.0 - mine

    def _exact_value(self) -> tuple[float, bool] | None:
        """The board's value for the side to move if the game ends here (or the leaf mate probe decides
        it), and whether the previous mover won by it; None if the network must judge."""
        board = self.board
        t = terminal(board, max_moves=self.params.max_moves, repetition_ply=self.params.repetition_ply)
        if t is not None:
            return t.value(board.turn, self._draw_value(board.turn)), t.winner not in (None, board.turn)
        mate = leaf_mate_value(board, self.params.leaf_mate_plies)
        return None if mate is None else (mate, False)

    def _exact(self, node: PuctNode, parent: PuctNode | None, idx: int) -> bool:
        """Decide `node` (the board is at it) without the network if the game ends here."""
        exact = self._exact_value()
        if exact is None:
            return False
        node.terminal = node.value = exact[0]
        if parent is not None and exact[1]:
            parent.win_idx = idx  # a move that wins the game outright: always play it
        return True

    def _from_cache(self, node: PuctNode) -> bool:
        hit = self.cache.get(self.board.zobrist_hash())
        if hit is None:
            return False
        node.expand(hit.moves, hit.logits.astype(np.float64), hit.value, self.params.softmax_temperature)
        return True

    def evaluate_root(self) -> PuctNode:
        """Make sure the root exists and is expanded (the board is at the root)."""
        if self.root is None:
            self.root = PuctNode()
            self.nodes = 1
        root = self.root
        if root.moves is None:
            if not self._from_cache(root):
                moves, labels = legal_moves_and_labels(self.board)
                fill_features(self.board, self.ev.x1[0], self.ev.x2[0])
                policy, value = self.ev.evaluate(1)
                logits, v = policy[0][labels], float(value[0])
                self.cache.put(self.board.zobrist_hash(), moves, logits, v)
                root.expand(moves, logits.astype(np.float64), v, self.params.softmax_temperature)
            root.win_idx = self._mate_in_one(root.moves)
        return root

    def _mate_in_one(self, moves: np.ndarray) -> int:
        """The index in `moves` of a move that mates at once from the board's position, else -1. A leaf
        that can mate is decided by its probe and never expanded: only the root needs this, or a search
        whose other moves all lose fast spreads its visits by prior and may never try the mate."""
        board = self.board
        mate = 0 if board.is_check() else board.mate_move_in_1ply()
        hit = np.flatnonzero(moves == mate) if mate else ()
        return int(hit[0]) if len(hit) else -1

    # ----- the search -----

    @staticmethod
    def _backup(path: list[tuple[PuctNode, int]], value: float) -> None:
        """`value` is for the side to move at the leaf; each parent sees its complement."""
        for node, idx in reversed(path):
            value = 1.0 - value
            node.child_w[idx] += value
            node.w += value

    @staticmethod
    def _undo_virtual_loss(path: list[tuple[PuctNode, int]]) -> None:
        for node, idx in path:
            node.child_n[idx] -= 1
            node.n -= 1

    def _collect(
        self,
    ) -> tuple[list[tuple[list[tuple[PuctNode, int]], PuctNode, int, np.ndarray, np.ndarray]], int]:
        """Walk `batch_size` playouts; returns leaves queued for the network and playouts completed."""
        board, p = self.board, self.params
        root = self.root
        queued: list = []
        done = 0
        collisions = 0
        for _ in range(self.batch_size):
            if self.nodes >= p.node_limit:
                break
            path: list[tuple[PuctNode, int]] = []
            node = root
            while True:
                if node.terminal is not None:
                    self._backup(path, node.terminal)
                    done += 1
                    break
                if node.pending:
                    self._undo_virtual_loss(path)
                    collisions += 1
                    break
                if node.moves is None:
                    parent, pidx = path[-1] if path else (None, -1)
                    self.nodes += 1
                    if self._exact(node, parent, pidx) or self._from_cache(node):
                        self._backup(path, node.value)
                        done += 1
                    else:
                        moves, labels = legal_moves_and_labels(board)
                        k = len(queued)
                        fill_features(board, self.ev.x1[k], self.ev.x2[k])
                        node.pending = True
                        queued.append((path, node, board.zobrist_hash(), moves, labels))
                    break
                if node.win_idx >= 0:
                    idx = node.win_idx
                elif node is root:
                    idx = puct_select(root, p.c_init_root, p.c_base_root, p.c_fpu_reduction_root)
                else:
                    idx = puct_select(node, p.c_init, p.c_base, p.c_fpu_reduction)
                node.child_n[idx] += 1
                node.n += 1
                child = node.children[idx]
                if child is None:
                    child = node.children[idx] = PuctNode()
                board.push(int(node.moves[idx]))
                path.append((node, idx))
                node = child
            if len(path) > self.seldepth:
                self.seldepth = len(path)
            for _ in path:
                board.pop()
            if collisions > self.batch_size // 2 + 1:
                break
        return queued, done

    def _step(self, calls: InFlight) -> int:
        """A batch collected into the free slot and its call started; the oldest call finished once every
        slot is busy, or when nothing new was queued. Returns the playouts completed."""
        self.ev = calls.free
        queued, done = self._collect()
        if queued:
            calls.start(queued)
        if calls and (calls.full or not queued):
            done += self._finish(*calls.finish_oldest())
        return done

    def _finish(self, queued: list, outputs: Outputs) -> int:
        self._expand_batch(queued, *outputs)
        return len(queued)

    def _expand_batch(self, queued: list, policy: np.ndarray, value: np.ndarray) -> None:
        """The evaluated leaves (row i of `policy`/`value` is queued[i]): expanded, cached, backed up."""
        t = self.params.softmax_temperature
        for i, (path, node, key, moves, labels) in enumerate(queued):
            logits = policy[i][labels]
            v = float(value[i])
            self.cache.put(key, moves, logits, v)
            node.expand(moves, logits.astype(np.float64), v, t)
            node.pending = False
            self._backup(path, v)

    def _should_stop(self, control: SearchControl, playouts: int, nps: float) -> bool:
        root = self.root
        if control.stopped or self.nodes >= self.params.node_limit:
            return True
        if control.max_playouts is not None and playouts >= control.max_playouts:
            return True
        if control.infinite:
            return False
        now = time.monotonic()
        if control.hard is not None and now >= control.hard:
            return True
        if root.win_idx >= 0 or len(root.moves) == 1:
            return True
        if control.target is not None:
            if now >= control.target:
                return True
            order = np.argsort(root.child_n)
            if len(order) > 1 and nps > 0 and (control.saving is None or now < control.saving):
                left = (control.target - now) * nps
                if can_stop_early(int(root.child_n[order[-1]]), int(root.child_n[order[-2]]), left):
                    return True
        return False

    def run(
        self,
        control: SearchControl,
        on_info: Callable[[PuctResult], None] | None = None,
        info_interval: float = 0.0,
        rng: np.random.Generator | None = None,
    ) -> PuctResult:
        """Search from the root (set by `set_position`) until `control` says stop."""
        if self.params.mode == "gumbel":
            return self._run_gumbel(control, rng or np.random.default_rng())
        root = self.evaluate_root()
        self.seldepth = 0
        playouts = 0
        next_info = time.monotonic() + info_interval
        with InFlight(self.slots) as calls:
            try:
                while len(root.moves) and not self._should_stop(
                    control, playouts, playouts / max(time.monotonic() - control.start, 1e-3)
                ):
                    playouts += self._step(calls)
                    if on_info is not None and info_interval > 0 and time.monotonic() >= next_info:
                        on_info(self.result(control))
                        next_info = time.monotonic() + info_interval
                while calls:
                    playouts += self._finish(*calls.finish_oldest())
            except BaseException:
                self.root = self.root_key = (
                    None  # leaves of unfinished calls hold virtual losses: drop the tree
                )
                raise
            finally:
                self.ev = self.slots[0]
        return self.result(control)

    def _run_gumbel(self, control: SearchControl, rng: np.random.Generator) -> PuctResult:
        """Search_Mode gumbel: self-play's own search (engine.search.gumbel_tree, mctx's algorithm) with a
        budget of `max_playouts` simulations (64 if unset), cut short by `stop` or the hard deadline."""
        from engine.search.gumbel_tree import TreeSearch  # numba: compiled at the first gumbel search

        p = self.params
        self.root = self.root_key = None  # the PUCT tree is not kept across modes
        board = self.board
        if board.is_game_over():
            return PuctResult(None, None, 0.0, [], 0, 0, 0, 0, time.monotonic() - control.start)
        params = GumbelParams(
            sims=control.max_playouts or 64, considered=p.gumbel_considered, c_visit=p.gumbel_c_visit,
            c_scale=p.gumbel_c_scale, rescale=p.gumbel_rescale, max_moves=p.max_moves,
            draw_value=self._draw_value(board.turn),
            noise=p.gumbel_noise, leaf_mate_plies=p.leaf_mate_plies, root_lines=p.multipv > 1,
        )  # fmt: skip

        def stop() -> bool:
            return control.stopped or (control.hard is not None and time.monotonic() >= control.hard)

        r = search_position(board, self.ev, params, rng, self.cache, search_type=TreeSearch, stop=stop)
        self.gumbel_result = r
        sims = r.simulations
        return PuctResult(
            bestmove=r.moves[r.choice], ponder=r.pv[1] if len(r.pv) > 1 else None, value=r.value, pv=r.pv,
            playouts=sims, nodes=sims + 1, depth=len(r.pv), seldepth=len(r.pv),
            elapsed=time.monotonic() - control.start,
        )  # fmt: skip

    # ----- reading the tree -----

    def best_index(self, node: PuctNode) -> int:
        if node.win_idx >= 0:
            return node.win_idx
        n = node.child_n
        if not n.any():
            return int(np.argmax(node.priors))
        q = node.q()
        return int(np.lexsort((q, n))[-1])  # most visited, ties to the better value

    def principal_variation(self, max_len: int = 64, node: PuctNode | None = None) -> list[int]:
        """The most visited line from `node` (default: the root)."""
        pv: list[int] = []
        node = self.root if node is None else node
        while node is not None and node.moves is not None and len(node.moves) and len(pv) < max_len:
            idx = self.best_index(node)
            pv.append(int(node.moves[idx]))
            if node.child_n[idx] == 0 and node.win_idx != idx:
                break
            node = node.children[idx]
        return pv

    def result(self, control: SearchControl) -> PuctResult:
        root = self.root
        elapsed = time.monotonic() - control.start
        if root is None or root.moves is None or not len(root.moves):
            return PuctResult(None, None, 0.0, [], 0, self.nodes, 0, self.seldepth, elapsed)
        idx = self.best_index(root)
        pv = self.principal_variation()
        n = int(root.child_n[idx])
        value = float(root.child_w[idx] / n) if n else root.value
        mate = None
        if root.win_idx >= 0:  # a won terminal child: mate in one, or a won repetition (not a mate)
            value = 1.0
            self.board.push(int(root.moves[root.win_idx]))
            mate = 1 if self.board.is_game_over() else None
            self.board.pop()
        return PuctResult(
            bestmove=int(root.moves[idx]),
            ponder=pv[1] if len(pv) > 1 else None,
            value=value,
            pv=pv,
            playouts=int(root.n),
            nodes=self.nodes,
            depth=len(pv),
            seldepth=max(self.seldepth, len(pv)),
            elapsed=elapsed,
            mate_plies=mate,
        )


def policy_move(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """The policy player's choice among legal-move logits: greedy at temperature 0, else sampled
    from softmax(logits / temperature)."""
    if temperature <= 0:
        return int(np.argmax(logits))
    probs = gumbel.softmax(np.asarray(logits, dtype=np.float64) / temperature)
    return int(rng.choice(len(probs), p=probs))
