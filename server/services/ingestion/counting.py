"""The rule "which records count after a start or a resume of the worker", written here only: pure, no database and
no files, so that ingestion, the migration that filled the verdicts of old records, and the tests replay the same
rule."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

# The kinds whose records are figures of one place of the run (an epoch, a rank's memory or timings in an epoch, the
# inference figures): a later print of the same place replaces a record, and a new start of the worker drops it.
PLACED_KINDS = ("epoch", "memory", "timing", "inference")
# Kinds printed once per rank: the rank is part of their place.
PER_RANK_KINDS = frozenset({"memory", "timing"})
# The kinds the rule reads: the placed ones and those that change what counts.
RULE_KINDS = frozenset({"start", "resume", *PLACED_KINDS})


class Place(NamedTuple):
    """A record's kind, epoch and rank; for a placed kind, the figure it gives (epoch None: the inference figures,
    which no checkpoint holds)."""

    kind: str
    epoch: int | None
    rank: int | None


def place_of(kind: str, epoch: int | None, record: Mapping[str, Any]) -> Place:
    """The place of a stored record: a per-rank record's rank is in its JSON alone."""
    return Place(kind, epoch, record.get("rank") if kind in PER_RANK_KINDS else None)


class Change(NamedTuple):
    """The offsets of the records that one record made stop counting, and of those it made count again."""

    dropped: list[int]
    restored: list[int]


# Every placed record printed so far whose epoch is at most the given one, in output order, as (place, offset).
Printed = Callable[[int], Iterable[tuple[Place, int]]]


class Standing:
    """Which of one run's records count now, one per place, named by offset: the rule, written here only.

    Records in output order: a `start` (a new attempt of the worker) drops everything placed so far; a `resume` of
    epoch e brings back, for each place of an epoch at most e, the latest record of it printed so far, and drops the
    rest; any other placed record replaces the one of its place. What was printed before is asked of `printed` only
    at a resume, so that ingestion reads it from the database then and not on every record.
    """

    def __init__(self, counting: Mapping[Place, int], printed: Printed) -> None:
        self.counting = dict(counting)
        self._printed = printed

    def apply(self, offset: int, place: Place) -> Change:
        """Take the record at `offset` into account."""
        if place.kind == "start":
            dropped, self.counting = list(self.counting.values()), {}
            return Change(dropped, [])
        if place.kind == "resume" and place.epoch is not None:
            last = place.epoch
            kept = {other: at for other, at in self._printed(last) if other.epoch is not None and other.epoch <= last}
            dropped = [at for other, at in self.counting.items() if kept.get(other) != at]
            restored = [at for other, at in kept.items() if self.counting.get(other) != at]
            self.counting = kept
            return Change(dropped, restored)
        if place.kind in PLACED_KINDS:
            replaced = self.counting.get(place)
            self.counting[place] = offset
            return Change([] if replaced is None else [replaced], [])
        return Change([], [])


def counting(history: Iterable[tuple[int, Place]]) -> set[int]:
    """The offsets of the records that count, of a run's whole history given as (offset, place) in output order:
    the rule replayed from the first record, for a database filled before the verdicts were kept."""
    printed: list[tuple[Place, int]] = []
    standing = Standing({}, lambda _epoch: printed)
    for offset, place in history:
        standing.apply(offset, place)
        if place.kind in PLACED_KINDS:
            printed.append((place, offset))
    return set(standing.counting.values())
