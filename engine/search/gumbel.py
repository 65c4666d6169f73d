"""Gumbel AlphaZero search math (Danihelka et al. 2022), exactly as DeepMind's mctx computes it.

Pure numpy functions over one node's legal actions, shared by self-play and the USI engine's Gumbel
root. Values are win probabilities in [0, 1] from the point of view of the side to move at the node
whose actions are scored (q(a) is the parent's expected result after playing a).
"""

from __future__ import annotations

import math

import numpy as np

C_VISIT = 50.0
C_SCALE = 0.1  # mctx's default; 1.0 made near one-hot targets (docs/selfplay.md#targets)
RESCALE = True  # sigma of min-max rescaled Q (mctx's qtransform_completed_by_mix_value)
Q_TRANSFORMS = ("minmax", "absolute")  # sigma's input: rescale_q's, or Q as it is (RESCALE False)
POLICY_TARGETS = ("improved", "visits")  # what a search writes as its policy target
VALUE_TARGETS = ("mean", "policy", "chosen")  # what it writes as the position's value (hcpe3 eval)
_LOW_LOGIT = -1e9  # mctx clamps scores so a -inf logit cannot tie with the -inf eligibility penalty
_EPS = 1e-8


def halving_schedule(m: int, n: int) -> list[tuple[int, int]]:
    """Sequential-halving phases as (considered actions, visits per action) for m actions, n sims.

    Each phase gives max(1, floor(n / (ceil(log2 m) * k))) visits to each of its k actions, then
    halves k (never below 2); phases stop once the budget n is used, so the last one may be cut short
    (see `considered_visits` for the exact per-simulation sequence). m=1 spends everything on one move.
    """
    if m < 1 or n < 0:
        raise ValueError(f"need m >= 1 and n >= 0 (got m={m}, n={n})")
    if m == 1:
        return [(1, n)] if n else []
    log2m = math.ceil(math.log2(m))
    phases: list[tuple[int, int]] = []
    used, k = 0, m
    while used < n:
        visits = max(1, int(n / (log2m * k)))
        phases.append((k, visits))
        used += k * visits
        k = max(2, k // 2)
    return phases


def considered_visits(m: int, n: int) -> list[int]:
    """The root visit count each of the n simulations targets (mctx's considered-visit sequence)."""
    seq: list[int] = []
    visits = [0] * m
    for k, per_action in halving_schedule(m, n):
        for _ in range(per_action):
            seq.extend(visits[:k])
            for i in range(k):
                visits[i] += 1
    return seq[:n]


def sigma(
    q_hat: np.ndarray, max_visits: int, c_visit: float = C_VISIT, c_scale: float = C_SCALE
) -> np.ndarray:
    """The monotone transform that turns rescaled Q into logit units: (c_visit + max N) * c_scale * q."""
    return (c_visit + max_visits) * c_scale * np.asarray(q_hat, dtype=np.float64)


def rescale_q(q: np.ndarray) -> np.ndarray:
    """Min-max rescale to [0, 1]; all-equal values map to 0 (as mctx, which divides by max(range, 1e-8))."""
    q = np.asarray(q, dtype=np.float64)
    lo = q.min()
    return (q - lo) / max(q.max() - lo, _EPS)


def transform_q(q: np.ndarray, rescale: bool = True) -> np.ndarray:
    """sigma's input: completed Q min-max rescaled over the node's moves (mctx), or with `rescale` off
    the win probabilities as they are (absolute Q in [0, 1]: a small difference stays small)."""
    return rescale_q(q) if rescale else np.asarray(q, dtype=np.float64)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


def mixed_value(q: np.ndarray, visits: np.ndarray, probs: np.ndarray, v_net: float) -> float:
    """v_mix: the network value blended with the prior-weighted Q of the visited actions."""
    total = visits.sum()
    if total == 0:
        return float(v_net)
    seen = visits > 0
    p = np.maximum(probs[seen], np.finfo(np.float64).tiny)
    weighted_q = float((p * q[seen]).sum() / p.sum())
    return (float(v_net) + total * weighted_q) / (1.0 + total)


def completed_q(q: np.ndarray, visits: np.ndarray, probs: np.ndarray, v_net: float) -> np.ndarray:
    """Q of visited actions; v_mix for the unvisited ones (their value is unknown, not zero)."""
    q = np.asarray(q, dtype=np.float64)
    visits = np.asarray(visits)
    return np.where(visits > 0, q, mixed_value(q, visits, np.asarray(probs, dtype=np.float64), v_net))


def improved_policy(
    logits: np.ndarray,
    q_completed_rescaled: np.ndarray,
    max_visits: int,
    c_visit: float = C_VISIT,
    c_scale: float = C_SCALE,
) -> np.ndarray:
    """The policy target: softmax(logits + sigma(q_hat)) over the legal moves (no Gumbel noise)."""
    return softmax(
        np.asarray(logits, dtype=np.float64) + sigma(q_completed_rescaled, max_visits, c_visit, c_scale)
    )


def _root_scores(gumbel: np.ndarray, logits: np.ndarray, q_hat_sigma: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    return np.maximum(_LOW_LOGIT, gumbel + (logits - logits.max()) + q_hat_sigma)


def select_root(
    gumbel: np.ndarray,
    logits: np.ndarray,
    q_hat_sigma: np.ndarray,
    visits: np.ndarray,
    considered_mask: np.ndarray,
    target_visits: int,
) -> int:
    """Sequential halving's choice: among considered actions visited exactly `target_visits` times,
    argmax of g + logits + sigma(q_hat)."""
    eligible = considered_mask & (np.asarray(visits) == target_visits)
    if not eligible.any():
        raise ValueError(f"no considered action has {target_visits} visits")
    return int(np.argmax(np.where(eligible, _root_scores(gumbel, logits, q_hat_sigma), -np.inf)))


def select_interior(logits: np.ndarray, completed_q_hat_sigma: np.ndarray, visits: np.ndarray) -> int:
    """Deterministic interior choice: argmax of pi'(a) - N(a) / (1 + sum N), pi' the improved policy."""
    visits = np.asarray(visits)
    pi = softmax(np.asarray(logits, dtype=np.float64) + completed_q_hat_sigma)
    return int(np.argmax(pi - visits / (1.0 + visits.sum())))


def final_move(
    gumbel: np.ndarray,
    logits: np.ndarray,
    q_hat_sigma: np.ndarray,
    visits: np.ndarray,
    considered_mask: np.ndarray,
) -> int:
    """The move to play: argmax of g + logits + sigma(q_hat) among the most visited considered actions."""
    visits = np.asarray(visits)
    return select_root(
        gumbel, logits, q_hat_sigma, visits, considered_mask, int(visits[considered_mask].max())
    )


def top_k_considered(gumbel: np.ndarray, logits: np.ndarray, m: int) -> np.ndarray:
    """Boolean mask of the m actions with the largest g + logits (the Gumbel-top-k sample)."""
    scores = gumbel + np.asarray(logits, dtype=np.float64)
    k = min(m, len(scores))
    mask = np.zeros(len(scores), dtype=bool)
    mask[np.argpartition(-scores, k - 1)[:k]] = True
    return mask


def visit_policy(visits: np.ndarray) -> np.ndarray:
    """The root's visit counts normalised: AlphaZero's policy target (zero visits get zero share)."""
    visits = np.asarray(visits, dtype=np.float64)
    return visits / visits.sum()


def root_value(
    kind: str, q: np.ndarray, visits: np.ndarray, probs: np.ndarray, v_net: float, improved: np.ndarray,
    choice: int,
) -> float:  # fmt: skip
    """The root's value as a training target, the root side's win probability.

    mean: mctx's node value, (v_net + sum W) / (1 + sum N); sequential halving spends most visits on
    moves it then drops, so this sits below the value of the move played. policy: the improved
    policy's expectation of the completed Q, sum pi'(a) q(a). chosen: the played move's Q.
    """
    visits = np.asarray(visits)
    q = np.asarray(q, dtype=np.float64)
    if kind == "mean":
        return (float(v_net) + float((q * visits).sum())) / (1.0 + float(visits.sum()))
    if kind == "policy":
        return float((np.asarray(improved) * completed_q(q, visits, probs, v_net)).sum())
    if kind == "chosen":
        return float(q[choice]) if visits[choice] else float(v_net)
    raise ValueError(f"value target must be one of {', '.join(VALUE_TARGETS)} (got {kind!r})")
