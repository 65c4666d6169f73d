"""Numba kernels over flat-array search trees: gumbel_tree (self-play's Gumbel search, the per-node
math of gumbel as loops over one node's edge slice) and puct_tree (PUCT, one call per playout's
descent), so a simulation costs a few compiled calls instead of dozens of small
numpy operations or Python objects.

Gumbel layout: node i owns edges first[i] .. first[i + 1] - 1 (its legal moves in cshogi order); edge
e has visits N[e], value sum W[e] (from the node's side to move), prior logit[e] and prob[e], and
child[e] (a node index, -1 before the first visit). PUCT's (first, count per node) is described at
its kernels. Compiled at first use and cached on disk (cache=True); engine.play.usi imports this only at
isready, never before `usiok`.
"""

from __future__ import annotations

import numba
import numpy as np

_TINY = np.finfo(np.float64).tiny
_EPS = 1e-8
_LOW_LOGIT = -1e9

# No nogil: each kernel runs for microseconds, and releasing the GIL that often only hands it to the
# evaluator thread (self-play's other group), so the search thread then waits to get it back.
jit = numba.njit(cache=True)


@jit
def sigma_q_hat(f, n, N, W, prob, v, c_visit, c_scale, out):  # noqa: ANN001, ANN201
    """out[:n] = sigma(rescaled completed Q) of the node whose edges are f..f+n-1 (gumbel.sigma of
    gumbel.rescale_q of gumbel.completed_q); returns the total visits."""
    total = 0
    max_n = 0
    p_sum = 0.0
    pq_sum = 0.0
    for i in range(n):
        k = N[f + i]
        total += k
        if k > max_n:
            max_n = k
        if k > 0:
            p = max(prob[f + i], _TINY)
            p_sum += p
            pq_sum += p * (W[f + i] / k)
    v_mix = v if total == 0 else (v + total * (pq_sum / p_sum)) / (1.0 + total)
    lo = np.inf
    hi = -np.inf
    for i in range(n):
        k = N[f + i]
        q = W[f + i] / k if k > 0 else v_mix
        out[i] = q
        lo = min(lo, q)
        hi = max(hi, q)
    span = max(hi - lo, _EPS)
    scale = (c_visit + max_n) * c_scale
    for i in range(n):
        out[i] = scale * ((out[i] - lo) / span)
    return total


@jit
def interior_action(f, n, N, W, logit, prob, v, c_visit, c_scale, work):  # noqa: ANN001, ANN201
    """gumbel.select_interior: argmax of pi'(a) - N(a) / (1 + sum N); the prior's argmax if unvisited."""
    total = sigma_q_hat(f, n, N, W, prob, v, c_visit, c_scale, work)
    if total == 0:
        best = 0
        for i in range(1, n):
            if logit[f + i] > logit[f + best]:
                best = i
        return best
    z_max = -np.inf
    for i in range(n):
        work[i] += logit[f + i]
        z_max = max(z_max, work[i])
    z_sum = 0.0
    for i in range(n):
        work[i] = np.exp(work[i] - z_max)
        z_sum += work[i]
    best = 0
    best_score = -np.inf
    for i in range(n):
        score = work[i] / z_sum - N[f + i] / (1.0 + total)
        if score > best_score:
            best, best_score = i, score
    return best


@jit
def descend(action, root, size, first, child, N, W, logit, prob, value, exact, move, c_visit, c_scale, paths,  # noqa: ANN001, ANN201
            path_moves, slot, work):  # fmt: skip
    """Walk from the root through `action`, then interior choices, until an unexpanded edge or an
    exact node (backed up here); paths[slot, :length] are the edges taken, path_moves[slot] their
    moves. Returns length, or 0 for an exact node: a new leaf gets node index `size` (the caller
    creates it), linked here."""
    path = paths[slot]
    path_moves = path_moves[slot]
    e = first[root] + action
    path[0] = e
    path_moves[0] = move[e]
    length = 1
    node = child[e]
    while node >= 0 and not exact[node]:
        f = first[node]
        b = interior_action(f, first[node + 1] - f, N, W, logit, prob, value[node], c_visit, c_scale, work)
        e = f + b
        path[length] = e
        path_moves[length] = move[e]
        length += 1
        node = child[e]
    if node >= 0:  # an exact node already in the tree
        backup(path, length, value[node], N, W)
        return 0
    child[e] = size
    return length


@jit
def backup(path, length, leaf_value, N, W):  # noqa: ANN001, ANN201
    """Add a leaf value (leaf's side to move) to every edge on the path, each from its mover's view."""
    value = leaf_value
    for i in range(length - 1, -1, -1):
        value = 1.0 - value
        N[path[i]] += 1
        W[path[i]] += value


EXACT, CACHED, WAITING = 0, 1, 2  # what engine.search.gumbel_tree found at a new leaf


@jit
def create_leaves(count, size, root_turn, kinds, values, counts, moves, logits, table, lengths, first, child,  # noqa: ANN001, ANN201
                  N, W, move, label, logit, prob, value, ready, exact, paths):  # fmt: skip
    """Create the round's new nodes size .. size+count-1 (leaf i reached by paths[i, :lengths[i]]),
    in order, so that each node's edges follow the previous node's. An EXACT leaf gets values[i]
    and no edges; the others get edges for their counts[i] moves (taken in turn from `moves`); a
    CACHED leaf also gets its priors (taken in turn from `logits`) and value values[i], backed up
    at once. WAITING leaves get theirs from `resolve`. The edge arrays must have room."""
    m = 0
    o = 0
    for i in range(count):
        node = size + i
        f = first[node]
        n = counts[i]
        first[node + 1] = f + n
        exact[node] = kinds[i] == EXACT
        ready[node] = False
        if kinds[i] == EXACT:
            value[node] = values[i]
            backup(paths[i], lengths[i], values[i], N, W)
            continue
        turn = root_turn ^ (lengths[i] & 1)
        for j in range(n):
            mv = moves[m + j]
            move[f + j] = mv
            label[f + j] = table[turn, mv & 0x7FFF]
            child[f + j] = -1
            N[f + j] = 0
            W[f + j] = 0.0
        m += n
        if kinds[i] == CACHED:
            set_prior(node, logits[o : o + n], values[i], first, logit, prob, value, ready)
            backup(paths[i], lengths[i], values[i], N, W)
            o += n


@jit
def softmax_in_place(x, f, n):  # noqa: ANN001, ANN201
    """x[f:f+n] = softmax(x[f:f+n]) (gumbel.softmax: shifted by the max, divided by the sum)."""
    x_max = -np.inf
    for i in range(n):
        x_max = max(x_max, x[f + i])
    total = 0.0
    for i in range(n):
        x[f + i] = np.exp(x[f + i] - x_max)
        total += x[f + i]
    for i in range(n):
        x[f + i] /= total


@jit
def set_prior(node, logits, v, first, logit, prob, value, ready):  # noqa: ANN001, ANN201
    """The node's priors: logit = logits, prob = their softmax (gumbel.softmax), value = v."""
    f = first[node]
    n = first[node + 1] - f
    value[node] = v
    ready[node] = True
    for i in range(n):
        logit[f + i] = logits[i]
        prob[f + i] = logits[i]
    softmax_in_place(prob, f, n)


@jit
def resolve(count, nodes, rows, slots, lengths, paths, policy, values, first, label, logit, prob, value,  # noqa: ANN001, ANN201
            ready, N, W, out):  # fmt: skip
    """The network output of waiting leaves 0..count-1 (node nodes[i], batch row rows[i], path
    paths[slots[i], :lengths[i]]): priors gathered from the policy row by the move labels, the row's
    value, backed up. Their legal-move logits go to `out` (float32, for the cache) one leaf after
    another."""
    o = 0
    for i in range(count):
        node, row = nodes[i], rows[i]
        f = first[node]
        n = first[node + 1] - f
        logits = out[o : o + n]
        for j in range(n):
            logits[j] = policy[row, label[f + j]]
        o += n
        v = np.float64(values[row])
        set_prior(node, logits, v, first, logit, prob, value, ready)
        backup(paths[slots[i]], lengths[i], v, N, W)


@jit
def plan_round(seq, k, f, n, N, W, logit, prob, v, g, considered, c_visit, c_scale, out, work):  # noqa: ANN001, ANN201
    """The root actions of the next simulations that can run together (engine.search.gumbel_search's
    `_round`): the first visits in g + logits order, a whole round when every eligible action gets a
    visit, otherwise sequential halving's single choice. Returns how many were written to `out`."""
    target = seq[k]
    run = 1
    while k + run < len(seq) and seq[k + run] == target:
        run += 1
    eligible = 0
    for i in range(n):
        if considered[i] and N[f + i] == target:
            out[eligible] = i
            eligible += 1
    if target == 0:  # unvisited actions share one completed Q: g + logits order, ties by index
        taken = min(run, eligible)
        for j in range(taken):
            best = j
            for t in range(j + 1, eligible):
                if g[out[t]] + logit[f + out[t]] > g[out[best]] + logit[f + out[best]]:
                    best = t
            chosen = out[best]
            for t in range(best, j, -1):
                out[t] = out[t - 1]
            out[j] = chosen
        return taken
    if eligible == run:
        return run
    sigma_q_hat(f, n, N, W, prob, v, c_visit, c_scale, work)
    l_max = -np.inf
    for i in range(n):
        l_max = max(l_max, logit[f + i])
    best = -1
    best_score = -np.inf
    for j in range(eligible):
        i = out[j]
        score = max(_LOW_LOGIT, g[i] + (logit[f + i] - l_max) + work[i])
        if score > best_score:
            best, best_score = i, score
    out[0] = best
    return 1


@jit
def plan_and_descend(seq, k, n, N, W, logit, prob, v, g, considered, c_visit, c_scale, out, work, size, first,  # noqa: ANN001, ANN201
                     child, value, exact, move, paths, path_moves, lengths):  # fmt: skip
    """plan_round at the root (node 0, n edges), then `descend` through each planned action (distinct
    actions: disjoint subtrees, so no descent depends on another's leaf). Returns (actions planned,
    new leaves): leaf i is node size + i, reached by paths[i, :lengths[i]] (moves path_moves[i])."""
    count = plan_round(seq, k, 0, n, N, W, logit, prob, v, g, considered, c_visit, c_scale, out, work)
    leaves = 0
    for j in range(count):
        length = descend(out[j], 0, size + leaves, first, child, N, W, logit, prob, value, exact, move,
                         c_visit, c_scale, paths, path_moves, leaves, work)  # fmt: skip
        if length:
            lengths[leaves] = length
            leaves += 1
    return count, leaves


@jit
def resolve_plan_descend(count, nodes, rows, slots, wait_lengths, policy, values, label, ready, logits_out,  # noqa: ANN001, ANN201
                         seq, k, n, N, W, logit, prob, v, g, considered, c_visit, c_scale, out, work, size,
                         first, child, value, exact, move, paths, path_moves, lengths):  # fmt: skip
    """`resolve` of the last round's waiting leaves, then `plan_and_descend` of the next round: one
    compiled call between two network calls."""
    resolve(count, nodes, rows, slots, wait_lengths, paths, policy, values, first, label, logit, prob, value,
            ready, N, W, logits_out)  # fmt: skip
    return plan_and_descend(seq, k, n, N, W, logit, prob, v, g, considered, c_visit, c_scale, out, work, size,
                            first, child, value, exact, move, paths, path_moves, lengths)  # fmt: skip


@jit
def root_result(n, N, W, logit, prob, v, g, considered, c_visit, c_scale, policy, work):  # noqa: ANN001, ANN201
    """The root's outcome (edges 0..n-1): policy[:n] = gumbel.improved_policy, and the returned
    move index is gumbel.final_move's (argmax of g + logits + sigma(q_hat) among the most visited
    considered actions, first index on ties)."""
    sigma_q_hat(0, n, N, W, prob, v, c_visit, c_scale, work)
    z_max = -np.inf
    l_max = -np.inf
    most = 0
    for i in range(n):
        policy[i] = logit[i] + work[i]
        z_max = max(z_max, policy[i])
        l_max = max(l_max, logit[i])
        if considered[i] and N[i] > most:
            most = N[i]
    z_sum = 0.0
    for i in range(n):
        policy[i] = np.exp(policy[i] - z_max)
        z_sum += policy[i]
    best = -1
    best_score = -np.inf
    for i in range(n):
        policy[i] /= z_sum
        if considered[i] and N[i] == most:
            score = max(_LOW_LOGIT, g[i] + (logit[i] - l_max) + work[i])
            if score > best_score:
                best, best_score = i, score
    return best


# ----- PUCT (engine.search.puct_tree): nodes carry visits n (virtual losses included) and value sums w -----

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
def puct_expand_from_row(node, moves, turn, table, row, policy, v, temperature, edges, first, count, state, value,  # noqa: ANN001, ANN201, E501
                         child, cn, cw, prior, move, pending, path_e, path_n, nw):  # fmt: skip
    """A queued leaf's network output: puct_expand with the logits gathered from the policy row by
    the moves' labels, no longer pending, v backed up along its path; returns the legal-move logits
    (float32, for the cache)."""
    logits = np.empty(len(moves), dtype=np.float32)
    for i in range(len(moves)):
        logits[i] = policy[row, table[turn, moves[i] & 0x7FFF]]
    puct_expand(
        node, moves, logits, v, temperature, edges, first, count, state, value, child, cn, cw, prior, move
    )
    pending[node] = False
    puct_backup(path_e, path_n, len(path_e), v, nw, cw)
    return logits
