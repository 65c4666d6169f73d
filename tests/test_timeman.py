from hypothesis import given
from hypothesis import strategies as st

from engine.play.timeman import (
    MIN_THINK_MS,
    Budget,
    Clock,
    budget,
    hard_limit,
    moves_to_go,
    root_mate_ms,
    simulations_for,
)
from engine.search.control import can_stop_early

ms = st.integers(min_value=0, max_value=3_600_000)


@given(ms, ms, ms, st.integers(1, 400), st.integers(0, 5000), st.integers(0, 5000))
def test_budget_never_exceeds_what_is_left(remaining, inc, byoyomi, ply, bmargin, tmargin):
    clock = Clock(remaining=remaining, increment=inc, byoyomi=byoyomi)
    b = budget(clock, ply, bmargin, tmargin)
    available = remaining + byoyomi  # the increment is added only after the move: never planned for
    assert MIN_THINK_MS <= b.target_ms <= b.hard_ms
    assert b.hard_ms <= max(available, MIN_THINK_MS)
    assert root_mate_ms(b.hard_ms) <= b.hard_ms


def test_byoyomi_is_used_fully_less_the_margin():
    assert budget(Clock(remaining=0, byoyomi=500), 30, byoyomi_margin=200) == Budget(300, 300, 0)
    assert budget(Clock(remaining=0, byoyomi=3000), 30, byoyomi_margin=100) == Budget(2900, 2900, 0)


def test_stopping_early_saves_main_time_only():
    # in byoyomi an early stop saves nothing (saving 0: never before the target); with main time left
    # it saves what is spent of the main time; sudden death and increment: always
    assert budget(Clock(remaining=0, byoyomi=1000), 30, byoyomi_margin=200).saving_ms == 0
    assert budget(Clock(remaining=5000, byoyomi=1000), 30, byoyomi_margin=200).saving_ms == 5000
    assert budget(Clock(remaining=60_000, increment=1000), 30).saving_ms is None


def test_sudden_death_spreads_time_and_keeps_the_margin():
    b = budget(Clock(remaining=60_000), 1, time_margin=1000)
    assert b.target_ms == 60_000 // moves_to_go(1)
    assert b.hard_ms == 59_000


def test_tiny_clock_still_gets_half_of_it():
    # the margin is larger than the clock: think at most half of what is left, never nothing
    assert hard_limit(Clock(remaining=800), byoyomi_margin=0, time_margin=1000) == 400
    assert hard_limit(Clock(remaining=0), byoyomi_margin=0, time_margin=1000) == MIN_THINK_MS


def test_fischer_increment_is_added_to_the_share_but_never_spent_in_advance():
    without = budget(Clock(remaining=10_000), 40, time_margin=500)
    with_inc = budget(Clock(remaining=10_000, increment=2000), 40, time_margin=500)
    assert with_inc.target_ms == without.target_ms + 2000
    assert with_inc.hard_ms == without.hard_ms == 9_500
    # 300 ms left and a 5 s increment: the increment comes after this move, so at most the 300 ms
    low = budget(Clock(remaining=300, increment=5000), 40, time_margin=1000)
    assert low.target_ms <= low.hard_ms <= 300


def test_moves_to_go_shrinks_late_but_never_below_ten():
    assert moves_to_go(1) >= moves_to_go(200) >= moves_to_go(400) == 10


def test_can_stop_early():
    assert can_stop_early(100, 10, 50)
    assert not can_stop_early(100, 60, 50)


def test_simulations_for_a_clock():
    assert simulations_for(None, 1.0, 64, 16, 100000) == 64  # no speed measured yet
    assert simulations_for(500.0, 0.8, 64, 16, 100000) == 400
    assert simulations_for(500.0, 0.001, 64, 16, 100000) == 16  # never below the floor
    assert simulations_for(1e7, 10.0, 64, 16, 100000) == 100000  # nor above the option's max
