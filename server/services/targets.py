"""Time to accuracy, the rules: when a run reached its target and how long its training took to get there, and how a
point of repeats is scored from its runs, as MLPerf Training scores its results. Pure functions over plain values:
the comparison gathers them (server.services.comparison.target_series)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from contract.target import WORKER_METRICS, Target
from server.models import EpochPoint
from server.services import statistics

# MLPerf Training's rule: from this many runs a point is scored by its olympic mean.
OLYMPIC_RUNS = 5


@dataclass(frozen=True)
class RunTarget:
    """A run against its target: reached or not, the epochs it counted to the epoch that first reached it and the
    training time they took, and its best figure (what a run that did not reach got to)."""

    reached: bool
    epochs: int | None  # the count of its epochs that count, up to and including the one that reached it
    time_s: float | None  # the sum of their epoch times
    at_last_epoch: bool  # the epoch that reached it is the last it counted (where stop_at_target ends a run)
    best: float | None
    best_epoch: int | None


def figure(epoch: EpochPoint, metric: str) -> float | None:
    """An epoch's figure of a target's metric: one of the worker's fields, or a program's own metric."""
    # The worker's quality figures are fields of its epochs; any other target metric is a program's own.
    if metric in WORKER_METRICS:
        value: float | None = getattr(epoch, metric)
        return value if value is not None else epoch.metrics.get(metric)
    return epoch.metrics.get(metric)


def run_target(target: Target, epochs: Sequence[EpochPoint]) -> RunTarget:
    """The run's epochs that count (after a resume, the effective ones), in order, against the target.

    Epochs are counted by position, not by the number a run printed: a program may number them from 0, and after a
    resume the counted epochs are the effective ones, one per epoch trained. The time is training time as the run
    measured it (each epoch's epoch_time_s): start-up, evaluation and checkpoints are not in it."""
    best: float | None = None
    best_epoch: int | None = None
    for position, epoch in enumerate(epochs, 1):
        value = figure(epoch, target.metric)
        if value is not None and math.isfinite(value) and (best is None or _better(target, value, best)):
            best, best_epoch = value, position
        if target.reached(value):
            time_s = math.fsum(counted.epoch_time_s for counted in epochs[:position])
            return RunTarget(True, position, time_s, position == len(epochs), best, best_epoch)
    return RunTarget(False, None, None, False, best, best_epoch)


def _better(target: Target, value: float, best: float) -> bool:
    return value > best if target.at_least is not None else value < best


@dataclass(frozen=True)
class Score:
    """A point's score by time to target, over its runs that ended or reached it."""

    scoring: Literal["olympic", "mean"] | None
    time_s: float | None
    ci_low_s: float | None
    ci_high_s: float | None
    n: int  # runs the score is over


def score(times: Sequence[float], not_reached: int) -> Score:
    """MLPerf's scoring of a point: with OLYMPIC_RUNS runs or more (those that reached, `times`, and those that ended
    without, `not_reached`), the mean without the fastest and the slowest, a run that did not reach counting as the
    slowest (infinitely slow), so that more than one such run leaves no score, with the 95 % Student's t interval of
    the runs it keeps; with fewer, the mean of the runs that reached with its interval (n >= 2)."""
    runs = len(times) + not_reached
    if runs >= OLYMPIC_RUNS:
        if not_reached > 1:
            return Score(None, None, None, None, 0)
        # The slowest dropped is the run that did not reach, where there is one.
        kept = sorted(times)[1:] if not_reached else sorted(times)[1:-1]
        # MLPerf gives the score alone; the interval over the runs it keeps says how far their spread leaves it.
        trimmed = statistics.point(0, kept)
        return Score("olympic", math.fsum(kept) / len(kept), trimmed.ci_low, trimmed.ci_high, len(kept))
    if not times:
        return Score(None, None, None, None, 0)
    point = statistics.point(0, times)
    return Score("mean", point.mean, point.ci_low, point.ci_high, point.n)


def as_point(gpus: int, mean: float | None, low: float | None, high: float | None, n: int) -> statistics.Point | None:
    """A figure with its interval, as the statistics of a point hold it; None without a figure."""
    return None if mean is None else statistics.Point(gpus=gpus, mean=mean, ci_low=low, ci_high=high, n=n)
