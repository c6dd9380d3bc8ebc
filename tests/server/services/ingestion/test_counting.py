"""The rule "which records count after a start or a resume of the worker", on plain places and offsets: no
database, no files."""

from __future__ import annotations

import random

import pytest

from server.services.ingestion.counting import (
    PER_RANK_KINDS,
    PLACED_KINDS,
    RULE_KINDS,
    Change,
    Place,
    Standing,
    counting,
    place_of,
)

START = Place("start", None, None)


def epoch(number: int) -> Place:
    return Place("epoch", number, None)


def resume(number: int) -> Place:
    return Place("resume", number, None)


def test_the_rule_reads_the_placed_kinds_and_those_that_change_what_counts():
    assert set(PLACED_KINDS) | {"start", "resume"} == RULE_KINDS
    assert PER_RANK_KINDS.issubset(PLACED_KINDS)


def test_a_per_rank_record_is_placed_by_its_rank_and_others_are_not():
    assert place_of("memory", 2, {"rank": 1}) == Place("memory", 2, 1)
    assert place_of("timing", 2, {"rank": 0}) == Place("timing", 2, 0)
    assert place_of("epoch", 2, {"rank": 1}) == epoch(2)
    assert place_of("inference", None, {}) == Place("inference", None, None)


def test_a_later_print_of_a_place_replaces_the_earlier_one():
    standing = Standing({}, lambda _epoch: [])
    assert standing.apply(0, epoch(1)) == Change([], [])
    assert standing.apply(10, epoch(1)) == Change([0], [])
    assert standing.counting == {epoch(1): 10}


def test_a_start_drops_everything_placed_so_far():
    standing = Standing({epoch(1): 0, epoch(2): 10}, lambda _epoch: [])
    assert standing.apply(20, START) == Change([0, 10], [])
    assert standing.counting == {}


def test_a_resume_brings_back_the_latest_print_of_each_place_up_to_its_epoch():
    printed = [(epoch(1), 0), (epoch(2), 10), (epoch(1), 30), (epoch(3), 40)]
    asked: list[int] = []

    def printed_up_to(last: int) -> list[tuple[Place, int]]:
        asked.append(last)
        return [(place, at) for place, at in printed if place.epoch is not None and place.epoch <= last]

    standing = Standing({epoch(1): 30, epoch(3): 40}, printed_up_to)
    change = standing.apply(50, resume(2))
    assert (sorted(change.dropped), sorted(change.restored)) == ([40], [10])
    assert standing.counting == {epoch(1): 30, epoch(2): 10}
    assert asked == [2]  # what was printed is asked at a resume only


def test_records_outside_the_rule_change_nothing():
    standing = Standing({epoch(1): 0}, lambda _epoch: [])
    assert standing.apply(10, Place("step", 1, None)) == Change([], [])
    assert standing.apply(20, Place("end", None, None)) == Change([], [])
    assert standing.counting == {epoch(1): 0}


def test_counting_replays_a_whole_history():
    history = [(0, START), (1, epoch(1)), (2, epoch(2)), (3, epoch(3)), (4, START), (5, resume(2)), (6, epoch(3))]
    assert counting(history) == {1, 2, 6}


def expected_epochs(history: list[tuple[str, int]]) -> dict[int, int]:
    """The rule as a reader would replay it: for each epoch, the index of the record that counts."""
    latest: dict[int, int] = {}
    current: dict[int, int] = {}
    for index, (kind, number) in enumerate(history):
        if kind == "start":
            current = {}
        elif kind == "resume":
            current = {e: i for e, i in latest.items() if e <= number}
        else:
            latest[number] = current[number] = index
    return current


@pytest.mark.parametrize("seed", range(20))
def test_counting_agrees_with_the_rule_replayed_by_hand(seed):
    rng = random.Random(seed)
    history = [("start", 0)] + [
        (kind, rng.randrange(0 if kind == "resume" else 1, 6))
        for kind in rng.choices(["start", "resume", "epoch", "epoch", "epoch"], k=rng.randrange(4, 40))
    ]
    places = [(index, START if kind == "start" else Place(kind, number, None)) for index, (kind, number) in
              enumerate(history)]  # fmt: skip
    assert counting(places) == set(expected_epochs(history).values())
