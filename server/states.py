"""Slurm's job states, mapped to scalelab's run states."""

from __future__ import annotations

from server.models import RunState

_SLURM_STATES: dict[str, RunState] = {
    "PENDING": RunState.pending,
    "CONFIGURING": RunState.pending,  # nodes are booting for the job
    "REQUEUED": RunState.pending,
    "REQUEUE_HOLD": RunState.pending,
    "REQUEUE_FED": RunState.pending,
    "RESV_DEL_HOLD": RunState.pending,
    "RUNNING": RunState.running,
    "COMPLETING": RunState.running,  # epilogs still run; the final state follows
    "SIGNALING": RunState.running,
    "STAGE_OUT": RunState.running,
    "RESIZING": RunState.running,
    "SUSPENDED": RunState.running,  # paused by an admin, resumes later; the verbatim state says so
    "STOPPED": RunState.running,
    "COMPLETED": RunState.completed,
    "FAILED": RunState.failed,
    "SPECIAL_EXIT": RunState.failed,
    "CANCELLED": RunState.cancelled,
    "REVOKED": RunState.cancelled,
    "PREEMPTED": RunState.preempted,  # final unless the job is requeued, which the monitor watches for
    "DEADLINE": RunState.timeout,
    "TIMEOUT": RunState.timeout,
    "NODE_FAIL": RunState.node_fail,
    "BOOT_FAIL": RunState.node_fail,
    "OUT_OF_MEMORY": RunState.out_of_memory,
}


def from_slurm(raw: str) -> RunState | None:
    """Our state for Slurm's (squeue long form or sacct, e.g. "CANCELLED by 1000"); None if unknown."""
    words = raw.strip().split()
    if not words:
        return None
    return _SLURM_STATES.get(words[0].rstrip("+").upper())
