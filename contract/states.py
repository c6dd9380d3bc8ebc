"""The states of a run, as the REST API names them: the server sets them, the client and the pages read them.

Which transitions happen and who may do what to a run in each state is the server's (server/runstate.py).
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    created = "created"
    submitted = "submitted"
    pending = "pending"
    running = "running"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"
    timeout = "timeout"
    node_fail = "node_fail"
    out_of_memory = "out_of_memory"
    preempted = "preempted"
    submit_failed = "submit_failed"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES


# A run in one of these has ended: nothing changes it but a resubmission (or Slurm requeueing a preempted job).
FINAL_STATES = frozenset(
    {
        RunState.completed,
        RunState.failed,
        RunState.cancelled,
        RunState.timeout,
        RunState.node_fail,
        RunState.out_of_memory,
        RunState.preempted,
        RunState.submit_failed,
    }
)
