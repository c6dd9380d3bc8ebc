"""Slurm's states, as squeue and sacct print them, mapped to ours."""

from __future__ import annotations

import pytest

from contract.states import FINAL_STATES, RunState
from server.runstate import LIVE_STATES
from server.scheduler import states
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


@pytest.mark.parametrize(
    ("scheduler", "queue"), [("slurm", "squeue"), ("slurmrestd", "slurmrestd's job listing"), ("pyslurm", "squeue")]
)
def test_the_unknown_job_message_names_where_the_backend_looked_and_what_to_do(scheduler, queue):
    message = states.unknown_job_message("4711", scheduler, 600)
    assert f"stopped following job 4711: for 10 min, neither Slurm's queue ({queue}) nor" in message
    assert message.endswith("Resubmit the run if it did not finish.")
    local = states.unknown_job_message("abc", "local", 45)
    assert "for 45 s, the local scheduler's job files have had no trace of it" in local
