"""Elo difference from a match score, with a 95% error bar and the likelihood of superiority.

The score p = (W + D/2) / N is the mean of per-game scores (1, 1/2, 0); its standard error comes from
the trinomial per-game variance, and the delta method carries it through the logistic Elo curve
elo(p) = -400 log10(1/p - 1), whose slope is 400 / (ln 10 * p (1 - p)). A perfect (or nil) score
would be infinitely many Elo, so p is kept half a pseudo-game away from 0 and 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054  # two-sided 95% quantile of the normal distribution


@dataclass(frozen=True)
class EloEstimate:
    wins: int
    losses: int
    draws: int
    score: float  # (W + D/2) / N, unclamped; 0.5 when no games
    elo: float
    error95: float  # half-width of the 95% interval, in Elo
    los: float  # probability that the first player is the stronger (from decisive games)

    @property
    def games(self) -> int:
        return self.wins + self.losses + self.draws

    def __str__(self) -> str:
        return (
            f"+{self.wins} -{self.losses} ={self.draws} score {self.score:.3f} "
            f"Elo {self.elo:+.1f} +/- {self.error95:.1f} LOS {self.los:.1%}"
        )


def score_to_elo(p: float) -> float:
    """Elo difference that makes the expected score `p` (0 < p < 1)."""
    return -400.0 * math.log10(1.0 / p - 1.0) + 0.0  # + 0.0: no "-0" for an even score


def expected_score(elo: float) -> float:
    """The inverse of score_to_elo: the expected score of a player `elo` stronger than its opponent."""
    return 1.0 / (1.0 + 10.0 ** (-elo / 400.0))


def clamp_score(p: float, games: int) -> float:
    """Keep p at least 1 / (2 (N + 1)) away from 0 and 1: a finite Elo for perfect scores."""
    eps = 0.5 / (games + 1)
    return min(max(p, eps), 1.0 - eps)


def likelihood_of_superiority(wins: int, losses: int) -> float:
    """P(first player stronger) under the normal approximation of decisive games (draws carry none)."""
    decisive = wins + losses
    if decisive == 0:
        return 0.5
    return 0.5 * (1.0 + math.erf((wins - losses) / math.sqrt(2.0 * decisive)))


def elo_estimate(wins: int, losses: int, draws: int) -> EloEstimate:
    """Elo of the first player relative to the second from its wins, losses and draws."""
    if min(wins, losses, draws) < 0:
        raise ValueError(f"negative game counts: +{wins} -{losses} ={draws}")
    n = wins + losses + draws
    if n == 0:
        return EloEstimate(0, 0, 0, 0.5, 0.0, math.inf, 0.5)
    score = (wins + 0.5 * draws) / n
    p = clamp_score(score, n)
    variance = (wins * (1.0 - p) ** 2 + draws * (0.5 - p) ** 2 + losses * p**2) / n
    return EloEstimate(
        wins,
        losses,
        draws,
        score,
        score_to_elo(p),
        error95(p, math.sqrt(variance / n)),
        likelihood_of_superiority(wins, losses),
    )


def error95(p: float, stderr: float) -> float:
    """Half-width in Elo of the 95% interval of a score `p` with standard error `stderr`: the delta
    method through the Elo curve, whose slope is 400 / (ln 10 p (1 - p))."""
    return Z95 * stderr * 400.0 / (math.log(10.0) * p * (1.0 - p))


def pair_error95(pair_scores: Sequence[float]) -> float:
    """The 95% half-width from the scores of game pairs (one opening, colours swapped; each the mean
    of its two games): the pentanomial model, whose variance keeps what the two games of a pair share
    through their opening. Infinite below two pairs."""
    n = len(pair_scores)
    if n < 2:
        return math.inf
    p = clamp_score(sum(pair_scores) / n, 2 * n)
    variance = sum((x - p) ** 2 for x in pair_scores) / n
    return error95(p, math.sqrt(variance / n))
