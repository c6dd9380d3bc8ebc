"""Slurm's states, as squeue and sacct print them, mapped to ours."""

from __future__ import annotations

import pytest

from contract.states import FINAL_STATES, RunState
from server.runstate import LIVE_STATES
from server.scheduler.states import from_slurm


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("PENDING", RunState.pending),
        ("CONFIGURING", RunState.pending),
        ("REQUEUED", RunState.pending),
        ("RUNNING", RunState.running),
        ("COMPLETING", RunState.running),
        ("COMPLETED", RunState.completed),
        ("FAILED", RunState.failed),
        ("CANCELLED by 0", RunState.cancelled),
        ("CANCELLED+", RunState.cancelled),
        ("TIMEOUT", RunState.timeout),
        ("NODE_FAIL", RunState.node_fail),
        ("BOOT_FAIL", RunState.node_fail),
        ("OUT_OF_MEMORY", RunState.out_of_memory),
        ("PREEMPTED", RunState.preempted),
        ("DEADLINE", RunState.timeout),
        (" running ", RunState.running),
    ],
)
def test_known_states(raw, state):
    assert from_slurm(raw) is state


@pytest.mark.parametrize("raw", ["", "   ", "WIBBLE"])
def test_unknown_states_map_to_nothing(raw):
    assert from_slurm(raw) is None


def test_every_state_is_created_live_or_final_and_only_one():
    groups = [{RunState.created}, set(LIVE_STATES), set(FINAL_STATES)]
    assert set().union(*groups) == set(RunState)
    assert sum(len(group) for group in groups) == len(RunState)
