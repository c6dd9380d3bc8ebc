"""Spread within a run, intervals over repeats, and the flags that say when a figure cannot be trusted."""

from __future__ import annotations

import numpy as np
import pytest

from server.services.statistics import (
    MIN_EPOCH_S,
    MIN_TIMED_EPOCHS,
    Point,
    Spread,
    epoch_spread,
    median,
    noisy,
    point,
    timed_epochs,
    too_short,
    warmup_dominated,
)


def test_spread_drops_the_warmup_epoch():
    assert epoch_spread([30.0, 10.0, 12.0, 11.0]) == Spread(median=11.0, low=10.0, high=12.0, n=3)


def test_spread_of_one_epoch_keeps_it():
    assert epoch_spread([7.5]) == Spread(median=7.5, low=7.5, high=7.5, n=1)


def test_spread_of_two_epochs_is_the_second():
    assert epoch_spread([9.0, 4.0]) == Spread(median=4.0, low=4.0, high=4.0, n=1)


def test_spread_of_no_epochs_is_none():
    assert epoch_spread([]) is None
    assert timed_epochs([]) == []


def test_interval_of_known_values():
    # mean 11, s = 1, n = 3: t(0.975, 2) = 4.302653
    p = point(4, [10.0, 11.0, 12.0])
    assert (p.gpus, p.mean, p.n) == (4, 11.0, 3)
    assert p.ci_low == pytest.approx(11 - 4.302653 / 3**0.5, rel=1e-6)
    assert p.ci_high == pytest.approx(11 + 4.302653 / 3**0.5, rel=1e-6)


def test_one_repeat_gives_no_interval():
    assert point(8, [3.0]) == Point(gpus=8, mean=3.0, ci_low=None, ci_high=None, n=1)


def test_no_repeats_is_an_error():
    with pytest.raises(ValueError, match="no values for 2 GPUs"):
        point(2, [])


def test_interval_covers_the_true_mean_95_percent_of_the_time():
    rng = np.random.default_rng(20240611)
    trials, true_mean = 2000, 10.0
    samples = rng.normal(true_mean, 1.0, size=(trials, 5))
    covered = 0
    for row in samples:
        p = point(1, row.tolist())
        assert p.ci_low is not None and p.ci_high is not None
        covered += p.ci_low <= true_mean <= p.ci_high
    assert 0.93 <= covered / trials <= 0.97


def interval(gpus, mean, half, n=3):
    return Point(gpus=gpus, mean=mean, ci_low=mean - half, ci_high=mean + half, n=n)


def test_a_point_whose_interval_holds_a_neighbours_mean_is_noisy():
    points = [interval(1, 100.0, 5.0), interval(2, 60.0, 30.0), interval(4, 35.0, 2.0)]
    # 2 GPUs' interval (30..90) holds 4 GPUs' mean; 1 and 4 GPUs' narrow intervals hold no neighbour's mean.
    assert noisy(points) == {2}


def test_noisy_sorts_by_gpus_and_looks_at_neighbours_only():
    points = [interval(4, 30.0, 1.0), interval(1, 100.0, 80.0), interval(2, 55.0, 1.0)]
    # 1 GPU's interval (20..180) holds 4 GPUs' mean too, but 4 is no neighbour of 1; it holds 2's mean.
    assert noisy(points) == {1}
    assert noisy([interval(1, 100.0, 10.0), interval(2, 150.0, 40.0), interval(4, 300.0, 10.0)]) == set()


def test_the_interval_end_counts_as_inside():
    assert noisy([interval(1, 10.0, 2.0), interval(2, 12.0, 0.5)]) == {1}


def test_points_without_an_interval_are_never_noisy_but_their_mean_counts():
    single = Point(gpus=2, mean=99.0, ci_low=None, ci_high=None, n=1)
    assert noisy([interval(1, 100.0, 5.0), single]) == {1}
    assert noisy([Point(gpus=1, mean=1.0, ci_low=None, ci_high=None, n=1), single]) == set()
    assert noisy([]) == set()


def test_too_few_timed_epochs():
    reason = too_short([5.0, 5.0])
    assert reason is not None and "only 2 timed epochs" in reason
    assert too_short([]) is not None
    one = too_short([5.0])
    assert one is not None and "only 1 timed epoch " in one
    assert too_short([5.0] * MIN_TIMED_EPOCHS) is None


def test_too_short_epochs():
    reason = too_short([5.0, 0.4, 5.0])
    assert reason is not None and "0.40 s" in reason
    assert too_short([MIN_EPOCH_S] * 3) is None


def test_warmup_dominates_when_its_excess_is_over_half_the_timed_total():
    # timed total 3 x 10 = 30 s; half is 15 s; the excess is first - 10.
    assert not warmup_dominated(25.0, 10.0, 3)  # excess 15: not over half
    assert warmup_dominated(25.1, 10.0, 3)
    assert not warmup_dominated(9.0, 10.0, 3)  # a first epoch faster than the rest
    assert not warmup_dominated(100.0, 10.0, 0)


def test_median_of_the_finite_values_none_without_one():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, None, 2.0, 3.0, float("nan"), float("inf")]) == 2.5
    assert median([None]) is None
    assert median([]) is None
