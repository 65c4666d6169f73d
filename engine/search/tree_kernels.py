"""Numba kernels over gumbel_tree's flat-array trees (self-play's Gumbel search): the per-node math
of gumbel as loops over one node's edge slice, and each round of many trees as one compiled call,
so a simulation costs a fraction of a compiled call instead of dozens of small numpy operations or
Python objects.

Gumbel layout: node i owns edges first[i] .. first[i + 1] - 1 (its legal moves in cshogi order); edge
e has visits N[e], value sum W[e] (from the node's side to move), prior logit[e] and prob[e], and
child[e] (a node index, -1 before the first visit). Compiled at first use and cached on disk
(cache=True); engine.play.usi imports this only at isready, never before `usiok`.
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
def sigma_q_hat(f, n, N, W, prob, v, c_visit, c_scale, rescale, out):  # noqa: ANN001, ANN201
    """out[:n] = sigma(transformed completed Q) of the node whose edges are f..f+n-1 (gumbel.sigma of
    gumbel.transform_q of gumbel.completed_q: min-max rescaled, or as it is without `rescale`);
    returns the total visits."""
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
    if not rescale:  # absolute Q: win probabilities are already in [0, 1]
        lo, hi = 0.0, 1.0
    span = max(hi - lo, _EPS)
    scale = (c_visit + max_n) * c_scale
    for i in range(n):
        out[i] = scale * ((out[i] - lo) / span)
    return total


@jit
def interior_action(f, n, N, W, logit, prob, v, c_visit, c_scale, rescale, work):  # noqa: ANN001, ANN201
    """gumbel.select_interior: argmax of pi'(a) - N(a) / (1 + sum N); the prior's argmax if unvisited."""
    total = sigma_q_hat(f, n, N, W, prob, v, c_visit, c_scale, rescale, work)
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
def descend(action, root, size, first, child, N, W, logit, prob, value, exact, move, c_visit, c_scale,  # noqa: ANN001, ANN201
            rescale, paths, path_moves, slot, work):  # fmt: skip
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
        b = interior_action(
            f, first[node + 1] - f, N, W, logit, prob, value[node], c_visit, c_scale, rescale, work
        )
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
def create_leaves(count, size, root_turn, kinds, values, counts, moves, m, logits, o, table, lengths, first,  # noqa: ANN001, ANN201
                  child, N, W, move, label, logit, prob, value, ready, exact, paths):  # fmt: skip
    """Create a round's new nodes size .. size+count-1 of one tree (leaf i reached by paths[i,
    :lengths[i]]), in order, so that each node's edges follow the previous node's. An EXACT leaf
    gets values[i] and no edges; the others get edges for their counts[i] moves (taken in turn from
    moves[m:]); a CACHED leaf also gets its priors (taken in turn from logits[o:]) and value
    values[i], backed up at once. WAITING leaves get theirs from `resolve`. The edge arrays must
    have room. Returns the offsets (m, o) after what it took."""
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
    return m, o


@jit
def create_all(trees, leaves, size, root_turn, kinds, values, counts, moves, logits, table, lengths, first,  # noqa: ANN001, ANN201
               child, N, W, move, label, logit, prob, value, ready, exact, paths):  # fmt: skip
    """create_leaves for each tree t in `trees` (rows of the 2-D arrays), its leaves[t] new nodes'
    moves and logits following the previous tree's in `moves` and `logits`."""
    m = 0
    o = 0
    for t in trees:
        m, o = create_leaves(
            leaves[t], size[t], root_turn[t], kinds[t], values[t], counts[t], moves, m, logits, o, table,
            lengths[t], first[t], child[t], N[t], W[t], move[t], label[t], logit[t], prob[t], value[t],
            ready[t], exact[t], paths[t],
        )  # fmt: skip
        size[t] += leaves[t]


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
            ready, N, W, out, o):  # fmt: skip
    """The network output of waiting leaves 0..count-1 (node nodes[i], batch row rows[i], path
    paths[slots[i], :lengths[i]]): priors gathered from the policy row by the move labels, the row's
    value, backed up. Their legal-move logits go to out[o:] (float32, for the cache) one leaf after
    another; returns the offset after them."""
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
    return o


@jit
def resolve_all(trees, waiting, nodes, rows, slots, lengths, paths, policy, values, first, label, logit, prob,  # noqa: ANN001, ANN201
                value, ready, N, W, out):  # fmt: skip
    """resolve for each tree t in `trees` (its waiting[t] leaves), the logits of one tree's leaves
    following the previous tree's in `out`; returns how many logits were written."""
    o = 0
    for t in trees:
        o = resolve(waiting[t], nodes[t], rows[t], slots[t], lengths[t], paths[t], policy, values, first[t],
                    label[t], logit[t], prob[t], value[t], ready[t], N[t], W[t], out, o)  # fmt: skip
    return o


@jit
def plan_round(seq, k, f, n, N, W, logit, prob, v, g, considered, c_visit, c_scale, rescale, out, work):  # noqa: ANN001, ANN201
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
    sigma_q_hat(f, n, N, W, prob, v, c_visit, c_scale, rescale, work)
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
def plan_and_descend(seq, k, n, N, W, logit, prob, v, g, considered, c_visit, c_scale, rescale, out, work,  # noqa: ANN001, ANN201
                     size, first, child, value, exact, move, paths, path_moves, lengths):  # fmt: skip
    """plan_round at the root (node 0, n edges), then `descend` through each planned action (distinct
    actions: disjoint subtrees, so no descent depends on another's leaf). Returns (actions planned,
    new leaves): leaf i is node size + i, reached by paths[i, :lengths[i]] (moves path_moves[i])."""
    count = plan_round(
        seq, k, 0, n, N, W, logit, prob, v, g, considered, c_visit, c_scale, rescale, out, work
    )
    leaves = 0
    for j in range(count):
        length = descend(out[j], 0, size + leaves, first, child, N, W, logit, prob, value, exact, move,
                         c_visit, c_scale, rescale, paths, path_moves, leaves, work)  # fmt: skip
        if length:
            lengths[leaves] = length
            leaves += 1
    return count, leaves


@jit
def plan_all(trees, seq, seq_len, k, n_legal, N, W, logit, prob, g, considered, c_visit, c_scale, rescale,  # noqa: ANN001, ANN201
             out, work, size, first, child, value, exact, move, paths, path_moves, lengths,
             leaves):  # fmt: skip
    """plan_and_descend for each tree t in `trees` (its root is node 0, its schedule seq[t,
    :seq_len[t]] from k[t] on): k[t] advances by the actions planned, leaves[t] is how many new
    leaves its round reached."""
    for t in trees:
        count, leaves[t] = plan_and_descend(
            seq[t, : seq_len[t]], k[t], n_legal[t], N[t], W[t], logit[t], prob[t], value[t, 0], g[t],
            considered[t], c_visit, c_scale, rescale, out, work, size[t], first[t], child[t], value[t],
            exact[t], move[t], paths[t], path_moves[t], lengths[t],
        )  # fmt: skip
        k[t] += count


@jit
def root_result(n, N, W, logit, prob, v, g, considered, c_visit, c_scale, rescale, policy, work):  # noqa: ANN001, ANN201
    """The root's outcome (edges 0..n-1): policy[:n] = gumbel.improved_policy, and the returned
    move index is gumbel.final_move's (argmax of g + logits + sigma(q_hat) among the most visited
    considered actions, first index on ties)."""
    sigma_q_hat(0, n, N, W, prob, v, c_visit, c_scale, rescale, work)
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
