"""Slurm's job states, mapped to scalelab's run states."""

from __future__ import annotations

from contract.states import RunState

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


# What happened and what to do, for the runs that Slurm ended for a reason of its own (the verbatim state and
# reason are kept beside the message). Failed runs get the worker's own error instead, from its end record.
END_MESSAGES: dict[RunState, str] = {
    RunState.out_of_memory: (
        "Slurm killed the job for using more memory than it was allocated. Resubmit it with more memory "
        '(resources.sbatch_options "mem" or "mem-per-cpu", where the cluster profile allows them), or make it '
        "smaller: a lower global_batch_size, bf16 precision, or fsdp over more GPUs."
    ),
    RunState.node_fail: (
        "A node of the job failed or stopped answering, and Slurm ended the job; the run itself is not at fault. "
        "Resubmit it; if it happens again, tell the cluster's admins the job id."
    ),
    RunState.timeout: (
        "The job reached its time limit. Resubmit it with a longer resources.time_limit or fewer epochs."
    ),
}


def end_message(state: RunState, reason: str | None) -> str | None:
    """The message for a run Slurm ended in `state`, with Slurm's reason where it gave one."""
    message = END_MESSAGES.get(state)
    if message is None or reason in (None, "", "None"):
        return message
    return f"{message} (Slurm's reason: {reason})"


def unknown_job_message(job_id: str, scheduler: str, waited_s: float) -> str:
    """What happened to a run whose job the scheduler stopped knowing, and what to do."""
    waited = f"{waited_s / 60:.0f} min" if waited_s >= 60 else f"{waited_s:.0f} s"
    if scheduler == "local":
        where = "the local scheduler's job files have had no trace of it (they may have been deleted)"
    else:
        queue = "slurmrestd's job listing" if scheduler == "slurmrestd" else "squeue"
        where = (
            f"neither Slurm's queue ({queue}) nor its accounting database (sacct) has known it (the controller's "
            "state may have been wiped, or slurmdbd lost the job's record)"
        )
    return (
        f"scalelab stopped following job {job_id}: for {waited}, {where}, so how it ended cannot be known. Its "
        "output so far is in the run's directory (see the log). Resubmit the run if it did not finish."
    )
