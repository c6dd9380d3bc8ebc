"""The stall rule: no new record for longer than k times the run's own median interval, within floor and ceiling."""

from __future__ import annotations

from server.services.stalls import RECENT_ARRIVALS, StallRule, bound_s, keep_arrival, pace_s, stall

RULE = StallRule(factor=4, floor_s=60, ceiling_s=1800)


def steady(interval: float, count: int = RECENT_ARRIVALS) -> list[float]:
    return [1000.0 + interval * i for i in range(count)]


def test_the_bound_is_k_times_the_median_interval_within_floor_and_ceiling():
    assert bound_s(steady(30), RULE) == 120
    assert bound_s(steady(1), RULE) == 60  # a fast run: the floor
    assert bound_s(steady(1000), RULE) == 1800  # a very slow one: the ceiling
    # One long interval (an evaluation, a checkpoint) moves the median little.
    assert pace_s([0, 30, 60, 90, 400, 430]) == 30


def test_a_run_silent_past_its_bound_is_stalled_and_within_it_is_not():
    arrivals = steady(30)
    last = arrivals[-1]
    assert stall(arrivals, 0, last + 119, RULE) is None
    found = stall(arrivals, 0, last + 121, RULE)
    assert found is not None and found.bound_s == 120 and found.pace_s == 30
    assert "no new record for 121 s, longer than its bound of 120 s" in found.sentence(RULE)


def test_a_run_that_slows_to_twice_its_pace_is_never_stalled():
    """Each interval twice the last pace: the bound (k times the median) grows with the run, and k is over 2."""
    arrivals = steady(30)
    for _ in range(3 * RECENT_ARRIVALS):
        at = arrivals[-1] + 60
        assert stall(arrivals, 0, at - 0.001, RULE) is None  # just before the slow record came
        arrivals = keep_arrival(arrivals, at)
    assert pace_s(arrivals) == 60


def test_before_its_first_record_a_run_has_the_ceiling_from_its_start():
    assert stall([], 100, 100 + 1799, RULE) is None
    found = stall([], 100, 100 + 1801, RULE)
    assert found is not None and found.pace_s is None and "since it started" in found.sentence(RULE)
    # One record (the batch script's start record) is no pace yet either.
    assert bound_s([500.0], RULE) == 1800


def test_only_the_latest_arrivals_are_kept():
    arrivals: list[float] = []
    for at in range(20):
        arrivals = keep_arrival(arrivals, float(at))
    assert arrivals == [float(at) for at in range(20 - RECENT_ARRIVALS, 20)]
