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


class FailureKind(StrEnum):
    """Why a run that did not complete ended, as one kind with one thing to do (server/services/failure_kinds.py
    decides and says it); the client filters on these (`scalelab rerun EXP --failed --kind out_of_memory`)."""

    hung = "hung"  # no record for longer than its own pace allows; its ranks' stacks say where each was
    out_of_memory = "out_of_memory"  # device or host memory: Slurm's state, or the CUDA / allocator message
    collective_timeout = "collective_timeout"  # an NCCL or gloo collective timed out
    node_failure = "node_failure"
    time_limit = "time_limit"
    import_error = "import_error"  # will fail again: the environment lacks a module or a driver
    program_error = "program_error"  # will fail again: the code raised
    launcher_error = "launcher_error"  # srun / torchrun / the container runtime failed before the program ran


# Kinds that fail again the same way at any size: a sweep stops the rest of the series after one (on_failure).
REPEATING_FAILURES = frozenset({FailureKind.import_error, FailureKind.program_error})
