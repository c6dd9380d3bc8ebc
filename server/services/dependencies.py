"""Inference runs that wait in Slurm for the training run whose checkpoint they read: which training run that has not
ended may be waited for (its job, named in --dependency=afterok), what a dependent run may be resubmitted after,
and the words for a training that ended without completing (server/services/dependents.py ends the runs that
waited for it).

Slurm holds a dependent job (state pending, reason Dependency) until the training job completes, then runs it; if
the training fails, is cancelled or times out, --kill-on-invalid-dep=yes has Slurm cancel it at once (reason
Dependency). The monitor then says why, and cancels any dependent Slurm left waiting. The local
scheduler cannot make one job wait for another: there, an inference names a run that has completed, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlmodel import Session

from contract.spec import RunSpec
from contract.states import FINAL_STATES, RunState
from server.models import Run
from server.render import AFTER_JOB
from server.scheduler import Scheduler
from server.services.inference import CheckpointError, Trained, gpt_on_text

# The ends of a training run that leave nothing to infer from.
UNFINISHED = FINAL_STATES - {RunState.completed}


@dataclass(frozen=True)
class After:
    """The training run an inference run's job waits for, and that run's job (afterok's argument)."""

    run_id: str
    job_id: str


def awaited(run: Run, scheduler: Scheduler) -> tuple[Trained, After]:
    """A training run that has not ended, to generate from once it completes: its job is what the inference's jobs
    wait for. CheckpointError says why it cannot be waited for."""
    what = f"run {run.id}"
    if not scheduler.uses_slurm:
        raise CheckpointError(
            f"{what} has not ended (it is {run.state}), and the {scheduler.name} scheduler cannot make a job wait "
            "for another: submit this inference once it has completed (with Slurm, it could wait in the queue)"
        )
    if run.job_id is None:
        held = f": {run.message}" if run.message else ""
        raise CheckpointError(
            f"{what} has no job to wait for yet (it is {run.state}{held}): name it once it is in Slurm's queue, "
            "or once it has completed"
        )
    if not AFTER_JOB.match(run.job_id):
        raise CheckpointError(f"{what}'s job id {run.job_id[:40]!r} is not one Slurm's --dependency takes")
    spec = RunSpec.model_validate(run.spec)
    gpt_on_text(spec, what)
    # The worker saves at each multiple of checkpoint_every: a run with fewer epochs will end with none.
    if not spec.checkpoint_every or spec.epochs < spec.checkpoint_every:
        raise CheckpointError(
            f"{what} will save no checkpoint (checkpoint_every {spec.checkpoint_every}, "
            f"{spec.epochs} epochs): train it with checkpoint_every set"
        )
    return Trained(Path(run.run_dir), spec), After(run.id, run.job_id)


def ended_words(training: Run) -> str:
    """How a training run that did not complete ended, in words: "failed (out of memory)", "was cancelled"."""
    state = training.state
    if state is RunState.failed:
        kind = training.failure_kind
        return f"failed ({str(kind).replace('_', ' ')})" if kind is not None else "failed"  # text, as stored
    return {
        RunState.out_of_memory: "failed (out of memory)",
        RunState.timeout: "reached its time limit",
        RunState.node_fail: "failed (a node failed)",
        RunState.cancelled: "was cancelled",
        RunState.preempted: "was preempted",
        RunState.submit_failed: "could not be submitted",
    }.get(state, f"ended {state}")


def nothing_to_infer(training: Run) -> str:
    """Why a run that waited for `training` ended, and what to do."""
    return (
        f"training run {training.id} {ended_words(training)}: nothing to infer from; "
        f"resubmit training run {training.id}, then clone this experiment"
    )


def why_not_resubmit(session: Session, run: Run) -> str | None:
    """Why a run that waited for a training run cannot be submitted again with its script (which waits for the
    training's job it was rendered with); None where it can: the training completed (Slurm runs the job at once),
    or still runs under that same job."""
    if run.after_run is None:
        return None
    training = session.get(Run, run.after_run)
    if training is None or training.state is RunState.completed:
        return None
    if training.state in UNFINISHED:
        return f"run {run.id} cannot be resubmitted: {nothing_to_infer(training)}"
    if training.job_id != run.after_job:
        return (
            f"run {run.id} cannot be resubmitted: it waits for job {run.after_job} of training run {training.id}, "
            f"which was submitted again since (job {training.job_id}); clone this experiment to wait for that one"
        )
    return None
