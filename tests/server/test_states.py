"""Slurm's states, as squeue and sacct print them, mapped to ours."""

from __future__ import annotations

import pytest

from server.models import RunState
from server.states import from_slurm


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
        ("PREEMPTED", RunState.cancelled),
        ("DEADLINE", RunState.timeout),
        (" running ", RunState.running),
    ],
)
def test_known_states(raw, state):
    assert from_slurm(raw) is state


@pytest.mark.parametrize("raw", ["", "   ", "WIBBLE"])
def test_unknown_states_map_to_nothing(raw):
    assert from_slurm(raw) is None


def test_final_states():
    assert {state for state in RunState if state.is_final} == {
        RunState.completed,
        RunState.failed,
        RunState.cancelled,
        RunState.timeout,
        RunState.node_fail,
        RunState.out_of_memory,
        RunState.submit_failed,
    }
