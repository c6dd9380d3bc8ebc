"""Stopping runs: the scheduler is asked to cancel live jobs; the monitor then sees them end."""

from __future__ import annotations

import logging

from sqlmodel import Session

from contract.states import RunState
from server.models import Run, RunEventKind, utcnow
from server.scheduler import Scheduler, SchedulerError
from server.services import history

log = logging.getLogger(__name__)


class RunAlreadyEnded(ValueError):
    """The run is final: there is nothing left to cancel."""


def cancel_run(session: Session, run: Run, scheduler: Scheduler) -> None:
    """Stage the cancellation of one run that has not ended; the caller commits.

    A run with a job keeps its state until the monitor sees the job cancelled, so the state always says
    what the scheduler said. A run that never reached the scheduler is cancelled at once.
    Raises RunAlreadyEnded for a final run, SchedulerError if the scheduler cannot cancel the job.
    """
    if run.state.is_final:
        raise RunAlreadyEnded(f"run {run.id} has already ended ({run.state}); there is nothing to cancel")
    history.record(session, run, RunEventKind.cancel_requested)
    if run.job_id is None:
        run.state = RunState.cancelled
        run.ended_at = utcnow()
        run.message = "cancelled before it was submitted"
        run.waiting = False
        session.add(run)
        return
    if run.scheduler != scheduler.name:
        raise SchedulerError(
            f"run {run.id} was submitted to the {run.scheduler} scheduler, but this server uses {scheduler.name}"
        )
    log.info("run %s: cancelling job %s", run.id, run.job_id)
    scheduler.cancel(run.job_id)
