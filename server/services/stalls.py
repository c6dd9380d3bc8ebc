"""When a live run is stalled, as a pure rule beside its sentence: no new record for longer than a bound that
follows the run's own pace, k times the median interval between its recent records, within a floor and a ceiling.

The times are the server's, not the job's: when a monitor cycle stored new records of the run (ingestion keeps the
latest few on the run). A job's own timestamps could lie; the cycle's clock cannot, and since the floor is many
poll intervals, the cycle's granularity does not matter. A merely slow run is never flagged: its bound grows with
its intervals. A run with no progress record (a step, an epoch, a prompt's generation, a program's metric line)
since it started has no pace yet: its bound is the ceiling (start-up). Its start, compute probe and memory records
come seconds apart, and then, with compile on, the first step can take minutes of compiling (or of waiting for
another process's compile of the same graph): a pace taken from them flagged a compiling inference as hung under
CI's load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from statistics import median

# The records that say the run's work moves on (a program's key=value lines included): its pace is measured from
# the first of them.
PROGRESS_KINDS = frozenset({"step", "epoch", "request", "inference", "legacy"})


def is_progress(kind: str) -> bool:
    return kind in PROGRESS_KINDS


# How many arrival times of its records a run keeps: the median of their 8 intervals is its pace, so that one slow
# step (an evaluation, a checkpoint) moves it little, while a lasting change of pace is followed within 4 or 5.
RECENT_ARRIVALS = 9


@dataclass(frozen=True)
class StallRule:
    """The settings hang_pace_factor, hang_floor_s and hang_ceiling_s."""

    factor: float
    floor_s: float
    ceiling_s: float


@dataclass(frozen=True)
class Stall:
    """A run found stalled: how long it has printed nothing, its bound, and the pace the bound came from."""

    silent_s: float
    bound_s: float
    pace_s: float | None  # the median interval between its recent records; None: no pace yet (start-up)

    def sentence(self, rule: StallRule) -> str:
        if self.pace_s is None:
            why = f"it has printed no record since it started, and a run's start-up may take {rule.ceiling_s:g} s"
        else:
            why = (
                f"{rule.factor:g} times the median interval between its recent records ({self.pace_s:.1f} s), "
                f"within {rule.floor_s:g} s and {rule.ceiling_s:g} s"
            )
        return f"no new record for {self.silent_s:.0f} s, longer than its bound of {self.bound_s:.0f} s: {why}"


def keep_arrival(arrivals: Sequence[float], at: float) -> list[float]:
    """The recent arrival times once records arrived at `at` (seconds since the epoch): the latest few."""
    return [*arrivals, at][-RECENT_ARRIVALS:]


def pace_s(arrivals: Sequence[float]) -> float | None:
    """The median interval between the recent arrivals; None with fewer than two."""
    intervals = [later - earlier for earlier, later in pairwise(arrivals)]
    return median(intervals) if intervals else None


def bound_s(arrivals: Sequence[float], rule: StallRule) -> float:
    """How long the run may go without a new record: k times its pace, within floor and ceiling; the ceiling
    before it has a pace."""
    pace = pace_s(arrivals)
    if pace is None:
        return rule.ceiling_s
    return min(rule.ceiling_s, max(rule.floor_s, rule.factor * pace))


def stall(arrivals: Sequence[float], running_since: float, now: float, rule: StallRule) -> Stall | None:
    """The run's stall, if it has gone longer than its bound without a new record (since `running_since` where it
    has none yet); None while it is within it."""
    last = max(arrivals[-1], running_since) if arrivals else running_since
    silent, bound = now - last, bound_s(arrivals, rule)
    return Stall(silent, bound, pace_s(arrivals)) if silent > bound else None
