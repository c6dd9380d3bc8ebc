"""The statistics behind a trustworthy scaling figure: spread within a run, intervals over repeats, sanity flags."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from scipy import stats  # type: ignore[import-untyped]  # scipy ships no type information

# Fewer timed epochs than this give no idea of the noise within a run.
MIN_TIMED_EPOCHS = 3
# Under a second per epoch, launch jitter and timer resolution weigh as much as the work measured.
MIN_EPOCH_S = 1.0
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Spread:
    """The timed epochs of one run: their median, fastest, slowest and count."""

    median: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class Point:
    """One GPU count's figure over its repeats: the mean with its 95 % Student's t interval (None for one repeat)."""

    gpus: int
    mean: float
    ci_low: float | None
    ci_high: float | None
    n: int


_T = TypeVar("_T")


def timed_epochs(times: Sequence[_T]) -> list[_T]:
    """The epochs that count for timing: all but the first (warm-up), unless it is the only one."""
    return list(times[1:]) if len(times) > 1 else list(times)


def epoch_spread(times: Sequence[float]) -> Spread | None:
    """The spread of a run's timed epochs, given its epoch times in order; None when it timed none."""
    timed = timed_epochs(times)
    if not timed:
        return None
    return Spread(median=statistics.median(timed), low=min(timed), high=max(timed), n=len(timed))


def median(values: Iterable[float | None]) -> float | None:
    """The median of the finite values (the middle two's mean for an even count); None when there is none: a figure
    some runs lack, or one that JSON cannot carry (NaN, infinities)."""
    finite = [value for value in values if value is not None and math.isfinite(value)]
    return statistics.median(finite) if finite else None


@functools.cache
def _t_quantile(degrees_of_freedom: int) -> float:
    """Student's t at the interval's upper end: scipy takes about 0.1 ms to find it, and a comparison of 200 runs
    asked for it at each of its points, every time."""
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, degrees_of_freedom))


def point(gpus: int, values: Sequence[float]) -> Point:
    """The mean of the repeats' values at one GPU count, with its two-sided 95 % Student's t interval."""
    n = len(values)
    if n == 0:
        raise ValueError(f"no values for {gpus} GPUs")
    mean = statistics.fmean(values)
    if n == 1:
        return Point(gpus=gpus, mean=mean, ci_low=None, ci_high=None, n=1)
    half = _t_quantile(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Point(gpus=gpus, mean=mean, ci_low=mean - half, ci_high=mean + half, n=n)


def ratio_bounds(baseline: Point, point: Point) -> tuple[float | None, float | None]:
    """The interval of a ratio of times (the baseline's over the point's: a speed-up) from the two points' intervals:
    the slowest baseline over the fastest point, and back (conservative: both ends at once); None where neither
    point has an interval."""
    if point.ci_low is None and baseline.ci_low is None:
        return None, None
    base_low = baseline.ci_low if baseline.ci_low is not None else baseline.mean
    base_high = baseline.ci_high if baseline.ci_high is not None else baseline.mean
    low = point.ci_low if point.ci_low is not None else point.mean
    high = point.ci_high if point.ci_high is not None else point.mean
    return (base_low / high if high > 0 else None), (base_high / low if low > 0 else None)


def noisy(points: Sequence[Point]) -> set[int]:
    """The GPU counts whose interval holds a neighbour's mean (ends included), so the trend to it cannot be read.

    Neighbours are the next smaller and next larger GPU count. A point without an interval (one repeat) is never
    noisy, but its mean still counts when it lies inside a neighbour's interval.
    """
    ordered = sorted(points, key=lambda p: p.gpus)
    flagged: set[int] = set()
    for i, here in enumerate(ordered):
        if here.ci_low is None or here.ci_high is None:
            continue
        neighbours = ordered[max(i - 1, 0) : i] + ordered[i + 1 : i + 2]
        if any(here.ci_low <= other.mean <= here.ci_high for other in neighbours):
            flagged.add(here.gpus)
    return flagged


def too_short(timed_epoch_times: Sequence[float]) -> str | None:
    """Why these timed epochs are too few or too short to time the run by, or None when they will do."""
    n = len(timed_epoch_times)
    if n < MIN_TIMED_EPOCHS:
        return (
            f"only {n} timed epoch{'' if n == 1 else 's'} (the first is warm-up and not timed); "
            f"run at least {MIN_TIMED_EPOCHS + 1} epochs so that {MIN_TIMED_EPOCHS} are timed"
        )
    shortest = min(timed_epoch_times)
    if shortest < MIN_EPOCH_S:
        return (
            f"a timed epoch took {shortest:.2f} s, under {MIN_EPOCH_S:g} s, where start-up jitter weighs as much "
            "as the work; use more data per epoch or fewer GPUs"
        )
    return None


def warmup_dominated(first_epoch_s: float, timed_median_s: float, timed_count: int) -> bool:
    """Whether the first epoch's excess over the timed median exceeds half the timed total (median x count).

    The excess is what warm-up (compilation, caches, data loading) cost; when it outweighs half of all the timed
    work, the run's total time says more about start-up than about scaling. With no timed epochs there is nothing
    to dominate.
    """
    if timed_count < 1:
        return False
    return first_epoch_s - timed_median_s > 0.5 * timed_median_s * timed_count
