"""The regression statistic on synthetic timings: identical distributions are rarely called regressed, a 20 %
slowdown with 5 repeats is found against a floor learned from A/A pairs, and the interval is deterministic."""

from __future__ import annotations

import random

import pytest

from server.services import regression

# Synthetic per-run times: 10 s with a 3 % spread between runs, as repeats of one exclusive point differ.
MEAN_S, SPREAD = 10.0, 0.03
REPEATS = 5


def runs(draw: random.Random, factor: float = 1.0, n: int = REPEATS) -> list[float]:
    return [draw.gauss(MEAN_S * factor, MEAN_S * factor * SPREAD) for _ in range(n)]


def aa_floor(draw: random.Random, pairs: int = 10) -> regression.Floor:
    """The floor this synthetic cluster's own A/A pairs give: the same spec twice, `pairs` times."""
    ratios = [regression.ratio(runs(draw), runs(draw)).ratio for _ in range(pairs)]
    return regression.learned_floor(ratios)


def test_identical_distributions_are_called_regressed_at_most_5_percent_of_200_draws():
    draw = random.Random(1)
    floor = aa_floor(draw)
    assert floor.source == "aa_pairs" and floor.pairs == 10 and 0 < floor.value < 0.1
    for threshold in (floor.value, regression.DEFAULT_FLOOR):
        verdicts = [regression.verdict(regression.ratio(runs(draw), runs(draw)), threshold) for _ in range(200)]
        assert verdicts.count("regressed") <= 10, (threshold, verdicts.count("regressed"))
        assert verdicts.count("improved") <= 10


def test_a_20_percent_slowdown_with_5_repeats_is_found_against_the_learned_floor():
    draw = random.Random(2)
    floor = aa_floor(draw)
    found = [
        regression.verdict(regression.ratio(runs(draw), runs(draw, 1.2)), floor.value) == "regressed" for _ in range(50)
    ]
    assert all(found), found.count(False)
    # And a 20 % speed-up the other way.
    faster = regression.ratio(runs(draw, 1.2), runs(draw))
    assert regression.verdict(faster, floor.value) == "improved"


def test_the_default_floor_hides_what_it_is_too_coarse_to_see():
    """Without A/A pairs the floor is the 22 % upper end: a 20 % slowdown is not called, which is why a profile's
    A/A pairs matter (and why the answer says where its floor came from)."""
    draw = random.Random(3)
    assert regression.learned_floor([]) == regression.Floor(regression.DEFAULT_FLOOR, "default", 0)
    slower = regression.ratio(runs(draw), runs(draw, 1.2))
    assert regression.verdict(slower, regression.DEFAULT_FLOOR) == "indistinguishable"
    doubled = regression.ratio(runs(draw), runs(draw, 2.0))
    assert regression.verdict(doubled, regression.DEFAULT_FLOOR) == "regressed"


def test_the_interval_is_the_same_every_time_and_holds_the_ratio():
    reference, later = [10.0, 10.4, 9.8], [12.1, 11.7, 12.4]
    first, again = regression.ratio(reference, later), regression.ratio(reference, later)
    assert first == again
    assert first.ci_low is not None and first.ci_high is not None
    assert first.ci_low <= first.ratio <= first.ci_high
    assert first.ratio == pytest.approx(sum(later) / sum(reference))
    assert (first.n_reference, first.n_later) == (3, 3)


def test_one_run_on_a_side_gives_a_ratio_but_no_interval_and_no_verdict():
    single = regression.ratio([10.0], [20.0, 21.0])
    assert single.ratio == pytest.approx(2.05) and single.ci_low is None
    assert regression.verdict(single, 0.0) == "no_verdict"


def test_the_learned_floor_is_the_95th_percentile_departure_nearest_rank():
    ratios = [1 + i / 100 for i in range(1, 21)]  # departures 0.01 .. 0.20
    assert regression.learned_floor(ratios).value == pytest.approx(0.19)
    assert regression.learned_floor([0.9, 1.05]).value == pytest.approx(0.1)  # few: the largest departure
    assert regression.learned_floor([float("nan"), -1.0]).source == "default"


def test_the_overall_verdict_is_the_worst_point():
    assert regression.overall(["indistinguishable", "regressed", "improved"]) == "regressed"
    assert regression.overall(["improved", "indistinguishable"]) == "improved"
    assert regression.overall(["no_verdict", "indistinguishable"]) == "indistinguishable"
    assert regression.overall([]) == "no_verdict"


def test_times_must_be_positive_and_present():
    with pytest.raises(ValueError):
        regression.ratio([], [1.0])
    with pytest.raises(ValueError):
        regression.ratio([0.0, 1.0], [1.0, 1.0])
