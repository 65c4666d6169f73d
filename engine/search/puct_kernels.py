"""Numba kernels over puct_tree's flat-array tree (the USI engine's PUCT search): one compiled call per
playout's descent (selection, virtual loss, backup of exact leaves, collisions), one per expansion.

Nodes carry visits n (virtual losses included) and value sums w; node i owns edges first[i] ..
first[i] + count[i] - 1 with visits cn, value sums cw, priors and moves. Compiled at first use and
cached on disk (cache=True), like tree_kernels.
"""

from __future__ import annotations

import numpy as np

from engine.search.tree_kernels import jit, softmax_in_place

UNEVALUATED, EXPANDED, TERMINAL = 0, 1, 2
LEAF, DONE, COLLISION = 0, 1, 2


@jit
def puct_select(node, first, count, nn, nw, value, cn, cw, prior, c_init, c_base, c_fpu_reduction):  # noqa: ANN001, ANN201
    """puct.puct_select over the node's edge slice (first index wins ties, as numpy's argmax)."""
    f = first[node]
    m = count[node]
    n = nn[node]
    c = c_init + np.log((n + 1 + c_base) / c_base)
    fpu = 0.0
    if n:
        seen = 0.0
        for i in range(m):
            if cn[f + i] > 0:
                seen += prior[f + i]
        fpu = c_fpu_reduction * np.sqrt(seen)
    parent_q = max(0.0, (nw[node] / n if n else value[node]) - fpu)
    sqrt_n = np.sqrt(n) if n else 1.0
    best = 0
    best_score = -np.inf
    for i in range(m):
        k = cn[f + i]
        q = cw[f + i] / k if k > 0 else parent_q
        score = q + c * (sqrt_n / (1.0 + k)) * prior[f + i]
        if score > best_score:
            best, best_score = i, score
    return best


@jit
def puct_backup(path_e, path_n, length, leaf_value, nw, cw):  # noqa: ANN001, ANN201
    """`leaf_value` is for the side to move at the leaf; each parent sees its complement."""
    value = leaf_value
    for i in range(length - 1, -1, -1):
        value = 1.0 - value
        cw[path_e[i]] += value
        nw[path_n[i]] += value


@jit
def puct_descend(root, size, first, count, state, pending, win_idx, nn, nw, value, child, cn, cw, prior,  # noqa: ANN001, ANN201
                 move, c, path_e, path_n, path_m):  # fmt: skip
    """One playout of engine.search.puct.Search._collect down to a leaf, virtual loss added on the way:
    returns (status, length, node, parent, idx). DONE: an exact node, already backed up; COLLISION:
    a leaf queued by an earlier playout, virtual loss undone; LEAF: `node` (edge idx of `parent`)
    needs evaluating, the caller walks the board by path_m[:length]. `size[0]` counts allocated
    nodes; c = (c_init, c_base, c_fpu, the same three at the root)."""
    node = root
    length = 0
    while True:
        if state[node] == TERMINAL:
            puct_backup(path_e, path_n, length, value[node], nw, cw)
            return DONE, length, node, -1, -1
        if pending[node]:
            for i in range(length):
                cn[path_e[i]] -= 1
                nn[path_n[i]] -= 1
            return COLLISION, length, node, -1, -1
        if state[node] == UNEVALUATED:
            parent = path_n[length - 1]
            return LEAF, length, node, parent, path_e[length - 1] - first[parent]
        if win_idx[node] >= 0:
            idx = win_idx[node]
        elif node == root:
            idx = puct_select(node, first, count, nn, nw, value, cn, cw, prior, c[3], c[4], c[5])
        else:
            idx = puct_select(node, first, count, nn, nw, value, cn, cw, prior, c[0], c[1], c[2])
        e = first[node] + idx
        cn[e] += 1
        nn[node] += 1
        if child[e] < 0:
            new = size[0]
            size[0] += 1
            state[new] = UNEVALUATED
            pending[new] = False
            win_idx[new] = -1
            nn[new] = 0
            nw[new] = 0.0
            value[new] = 0.5
            count[new] = 0
            child[e] = new
        path_e[length] = e
        path_n[length] = node
        path_m[length] = move[e]
        length += 1
        node = child[e]


@jit
def puct_expand(
    node, moves, logits, v, temperature, edges, first, count, state, value, child, cn, cw, prior, move
):  # noqa: ANN001, ANN201, E501
    """Give `node` its edges (from edges[0] on) with priors softmax(logits / temperature)."""
    f = edges[0]
    m = len(moves)
    edges[0] += m
    first[node] = f
    count[node] = m
    state[node] = EXPANDED
    value[node] = v
    for i in range(m):
        move[f + i] = moves[i]
        child[f + i] = -1
        cn[f + i] = 0
        cw[f + i] = 0.0
        prior[f + i] = logits[i] / temperature
    softmax_in_place(prior, f, m)


@jit
def puct_compact(root, first, count, state, pending, win_idx, nn, nw, value, child, cn, cw, prior, move, out):  # noqa: ANN001, ANN201, E501
    """Copy the subtree under `root` into the (empty, large enough) arrays of `out`, root first, in
    breadth-first order; returns (nodes, edges) copied. Everything else is garbage from earlier moves."""
    o_first, o_count, o_state, o_pending, o_win, o_nn, o_nw, o_value = out[:8]
    o_child, o_cn, o_cw, o_prior, o_move = out[8:]
    queue = [root]
    o_nodes = 1
    o_edges = 0
    head = 0
    while head < len(queue):
        old = queue[head]
        new = head
        head += 1
        o_state[new] = state[old]
        o_pending[new] = pending[old]
        o_win[new] = win_idx[old]
        o_nn[new] = nn[old]
        o_nw[new] = nw[old]
        o_value[new] = value[old]
        o_count[new] = count[old]
        o_first[new] = o_edges
        if state[old] != EXPANDED:
            continue
        f = first[old]
        for i in range(count[old]):
            e = o_edges + i
            o_move[e] = move[f + i]
            o_cn[e] = cn[f + i]
            o_cw[e] = cw[f + i]
            o_prior[e] = prior[f + i]
            if child[f + i] >= 0:
                o_child[e] = o_nodes
                o_nodes += 1
                queue.append(child[f + i])
            else:
                o_child[e] = -1
        o_edges += count[old]
    return o_nodes, o_edges


@jit
def puct_expand_batch(count, nodes, moves, move_start, turns, path_e, path_n, path_start, table, policy, values,  # noqa: ANN001, ANN201, E501
                      temperature, edges, first, cnt, state, value, child, cn, cw, prior, move, pending, nw,
                      logits):  # fmt: skip
    """The network output of a batch's queued leaves: leaf i (node nodes[i], side to move turns[i])
    gets puct_expand with the logits gathered from policy row i by the labels of its moves
    (moves[move_start[i]:move_start[i + 1]]), is no longer pending, and values[i] is backed up along
    its path (path_e/path_n[path_start[i]:path_start[i + 1]]). The legal-move logits (float32, for the
    cache) go to logits[move_start[i]:move_start[i + 1]]."""
    for i in range(count):
        ms, me = move_start[i], move_start[i + 1]
        leaf_moves = moves[ms:me]
        leaf_logits = logits[ms:me]
        for j in range(me - ms):
            leaf_logits[j] = policy[i, table[turns[i], leaf_moves[j] & 0x7FFF]]
        v = np.float64(values[i])
        puct_expand(nodes[i], leaf_moves, leaf_logits, v, temperature, edges, first, cnt, state, value, child,
                    cn, cw, prior, move)  # fmt: skip
        pending[nodes[i]] = False
        ps, pe = path_start[i], path_start[i + 1]
        puct_backup(path_e[ps:pe], path_n[ps:pe], pe - ps, v, nw, cw)
