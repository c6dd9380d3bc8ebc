"""Reading a foreign log: its records, and the run spec they describe."""

from __future__ import annotations

import pytest

from contract.states import RunState
from server.services.imports import parse_log
from tests.factories import course_log


def test_offsets_are_byte_offsets_of_the_lines():
    log = parse_log("héllo\n[METRIC] epoch=1 loss=1 time=2\n")
    assert [offset for offset, _ in log.records] == [len("héllo\n".encode())]


def test_the_spec_comes_from_what_the_log_says():
    log = parse_log(course_log(4, epochs=3))
    assert (log.spec.gpus, log.spec.strategy, log.spec.epochs) == (4, "ddp", 3)
    assert log.state is RunState.completed


def test_world_size_stands_in_for_gpus_and_the_first_mention_counts():
    log = parse_log(
        "[METRIC] world_size=2 nodes=1 lr=0.1\n[METRIC] epoch=1 loss=1 time=2 lr=0.01\n[METRIC] epochs=5 lr=0.5\n"
    )
    assert (log.spec.gpus, log.spec.lr, log.spec.epochs) == (2, 0.1, 5)


def test_unknown_keys_are_kept_as_metrics_but_not_in_the_spec():
    log = parse_log("[METRIC] gpus=2 cluster=alps\n[METRIC] epoch=1 loss=1 time=2\n")
    assert log.spec.gpus == 2
    assert log.records[0][1].model_dump()["values"] == {"gpus": 2.0, "cluster": "alps"}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("[METRIC] gpus=2.5\n[METRIC] epoch=1 loss=1 time=2\n", "gpus: "),
        ("[METRIC] gpus=4 nodes=3\n[METRIC] epoch=1 loss=1 time=2\n", "must be a multiple of nodes"),
        ("[METRIC] epoch=1 loss=1\n", "line 1: epoch.epoch_time_s: Field required"),
    ],
)
def test_what_cannot_be_read_is_said(content, reason):
    with pytest.raises(ValueError) as caught:
        parse_log(content)
    assert reason in str(caught.value)


def test_only_the_first_unreadable_lines_are_named():
    with pytest.raises(ValueError) as caught:
        parse_log("[METRIC] x\n" * 5)
    assert str(caught.value).endswith("line 3: legacy metric token 'x' is not key=value (and 2 more)")
