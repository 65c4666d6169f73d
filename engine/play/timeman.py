"""How long to think: pure functions from a `go` command's clock to a soft target and a hard limit.

The hard limit never exceeds what the clock allows for this move (time left + byoyomi, less the
safety margin); the soft target is what we aim for, and the search may stop earlier once the best
move cannot change, but only while stopping saves clock time: byoyomi left unused is lost, so in
byoyomi (and under `go movetime`) the search goes on to the target and the time deepens the subtree
the next move reuses. A Fischer increment is added by the GUI only after the move, so it is never
spent in advance: it only makes the target more generous when there is time left to cover it. All
times are milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_THINK_MS = 10  # even with nothing left we must spend a little to produce a move
DEFAULT_MOVE_HORIZON = 40  # sudden death: plan as if this many of our moves remain (at least)
MAX_GAME_PLY = 320  # beyond this the horizon stops shrinking
ROOT_MATE_SHARE = 0.25  # of the time left to the hard limit, for the df-pn search before the tree search


@dataclass(frozen=True)
class Clock:
    """The side to move's clock as given by `go`: remaining time, increment, byoyomi (ms)."""

    remaining: int = 0
    increment: int = 0
    byoyomi: int = 0


@dataclass(frozen=True)
class Budget:
    target_ms: int  # aim to stop here
    hard_ms: int  # never search beyond this
    saving_ms: int | None = None  # stopping early saves time only before this (None: always)


def moves_to_go(ply: int) -> int:
    """Our expected remaining moves: fewer as the game goes on, never fewer than 10."""
    left_plies = max(MAX_GAME_PLY - ply, 0)
    return max(10, min(DEFAULT_MOVE_HORIZON, left_plies // 2 + 10))


def hard_limit(clock: Clock, byoyomi_margin: int, time_margin: int) -> int:
    """The most this move may take: everything available now (time left + byoyomi; not the increment,
    which comes after the move) minus the margin (byoyomi margin when the clock has byoyomi, else the
    time margin), but if the margin would eat more than half of that, half of it (a tiny clock still
    gets a move in time)."""
    available = max(clock.remaining, 0) + max(clock.byoyomi, 0)
    margin = byoyomi_margin if clock.byoyomi > 0 else time_margin
    limit = available - max(margin, 0)
    return max(MIN_THINK_MS, min(available, max(limit, available // 2)))


def budget(clock: Clock, ply: int, byoyomi_margin: int = 0, time_margin: int = 0) -> Budget:
    """Target: an even share of the remaining time plus the per-move time we get back (byoyomi
    or increment); capped by the hard limit."""
    hard = hard_limit(clock, byoyomi_margin, time_margin)
    share = max(clock.remaining, 0) // moves_to_go(ply)
    per_move = clock.byoyomi if clock.byoyomi > 0 else clock.increment
    target = share + max(per_move, 0)
    saving = None
    if clock.byoyomi > 0:
        # byoyomi is lost if unused: always use it fully (minus the margin); once the main time is
        # spent, stopping early saves nothing.
        target = max(target, clock.byoyomi - byoyomi_margin)
        saving = max(clock.remaining, 0)
    return Budget(target_ms=max(MIN_THINK_MS, min(target, hard)), hard_ms=hard, saving_ms=saving)


def root_mate_ms(left_ms: float) -> float:
    """How much of the `left_ms` until the hard limit the root mate search may use."""
    return max(left_ms, 0.0) * ROOT_MATE_SHARE


def simulations_for(rate: float | None, seconds: float, default: int, low: int, high: int) -> int:
    """A search that must plan its simulation count up front (sequential halving): as many as `rate`
    (simulations/s measured on earlier searches) fits in `seconds`, within [low, high]; `default`
    before any rate is known."""
    if rate is None:
        return default
    return int(min(max(rate * seconds, low), high))
