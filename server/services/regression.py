"""The regression test of a later measurement against a pinned reference: the ratio of times (later over reference)
with a seeded bootstrap interval, the noise floor learned from A/A pairs (the same spec run twice), and the verdict
regressed / improved / indistinguishable. Plain numbers in, plain numbers out: no database, no torch."""

from __future__ import annotations

import functools
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["regressed", "improved", "indistinguishable", "no_verdict"]

# Resamples of the bootstrap, and its seed: the same figures give the same interval on every instance and every
# request (the interval is a figure the API shows; it must not wobble between two reads).
RESAMPLES = 2000
SEED = 35
CONFIDENCE = 0.95
# A side with fewer runs than this has no spread to resample: no interval, no verdict.
MIN_RUNS = 2

# The floor used until a profile has A/A pairs: 22 %, the upper end of the paired differences reported between
# identical configurations on shared clusters (the figure). Conservative on purpose: without a measurement
# of this cluster's noise, no difference that noise is known to produce elsewhere is called a regression. A
# profile's own A/A pairs replace it, usually with a far smaller floor, and only then are small slowdowns seen.
DEFAULT_FLOOR = 0.22
# The share of A/A ratios the learned floor covers: the floor is this quantile of |ratio - 1| (nearest rank), so
# with fewer than 20 ratios it is their largest departure from 1.
FLOOR_QUANTILE = 0.95
FloorSource = Literal["default", "aa_pairs"]


@dataclass(frozen=True)
class Ratio:
    """Later over reference: the ratio of the two means, and its bootstrap interval (None with too few runs)."""

    ratio: float
    ci_low: float | None
    ci_high: float | None
    n_reference: int
    n_later: int


@dataclass(frozen=True)
class Floor:
    """The relative difference below which two measurements of one spec are not told apart, and where it came
    from: the profile's A/A ratios (how many), or the default."""

    value: float
    source: FloorSource
    pairs: int


def _percentile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, interpolated linearly between ranks."""
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def ratio(reference: Sequence[float], later: Sequence[float], seed: int = SEED) -> Ratio:
    """The ratio of the later runs' mean time to the reference runs' mean, with a percentile bootstrap interval
    (RESAMPLES resamples of each side with replacement, independently; CONFIDENCE two-sided), seeded so that it is
    the same every time. Times must be positive."""
    if not reference or not later:
        raise ValueError("both sides need at least one time")
    if min(*reference, *later) <= 0:
        raise ValueError("times must be positive")
    return _ratio(tuple(reference), tuple(later), seed)


# Kept: the same runs are compared again at every read of a regression and at each entry of a history, and the
# answer is a pure function of the times (and the seed), so a finished comparison costs its bootstrap once.
@functools.lru_cache(maxsize=4096)
def _ratio(reference: tuple[float, ...], later: tuple[float, ...], seed: int) -> Ratio:
    point = statistics.fmean(later) / statistics.fmean(reference)
    if len(reference) < MIN_RUNS or len(later) < MIN_RUNS:
        return Ratio(point, None, None, len(reference), len(later))
    draw = random.Random(seed)  # noqa: S311 (a bootstrap, not a secret: seeded so that it repeats)
    n_ref, n_later = len(reference), len(later)
    ratios = sorted(
        statistics.fmean(draw.choices(later, k=n_later)) / statistics.fmean(draw.choices(reference, k=n_ref))
        for _ in range(RESAMPLES)
    )
    tail = (1 - CONFIDENCE) / 2
    return Ratio(point, _percentile(ratios, tail), _percentile(ratios, 1 - tail), n_ref, n_later)


def learned_floor(aa_ratios: Sequence[float]) -> Floor:
    """The noise floor from A/A ratios (a later A/A run's point over its reference's, each point one ratio): the
    FLOOR_QUANTILE of their departures |ratio - 1|, nearest rank; DEFAULT_FLOOR where there is none."""
    departures = sorted(abs(value - 1) for value in aa_ratios if math.isfinite(value) and value > 0)
    if not departures:
        return Floor(DEFAULT_FLOOR, "default", 0)
    rank = max(math.ceil(FLOOR_QUANTILE * len(departures)), 1)
    return Floor(departures[rank - 1], "aa_pairs", len(departures))


def verdict(measured: Ratio, floor: float) -> Verdict:
    """regressed: the whole interval lies above 1 + floor (slower by more than identical runs differ);
    improved: it lies below 1 / (1 + floor); indistinguishable: otherwise; no_verdict: no interval (a side with
    fewer than MIN_RUNS runs)."""
    if measured.ci_low is None or measured.ci_high is None:
        return "no_verdict"
    if measured.ci_low > 1 + floor:
        return "regressed"
    if measured.ci_high < 1 / (1 + floor):
        return "improved"
    return "indistinguishable"


# Worst first: one regressed point makes the whole comparison regressed.
_ORDER: tuple[Verdict, ...] = ("regressed", "improved", "indistinguishable", "no_verdict")


def overall(verdicts: Sequence[Verdict]) -> Verdict:
    """The verdict over every point: regressed if any point regressed; improved if some improved and none
    regressed; indistinguishable if every decided point is; no_verdict if none was decided."""
    present = set(verdicts)
    return next((each for each in _ORDER if each in present), "no_verdict")
