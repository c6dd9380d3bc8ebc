"""Ending the inference runs that waited in Slurm for a training run that ended without completing, each cycle of
the monitor (the rules are server/services/dependencies.py's)."""

from __future__ import annotations

import logging
from datetime import UTC, timedelta

from sqlalchemy.engine import Engine
from sqlalchemy.orm import aliased
from sqlmodel import Session, col, or_, select

from contract.states import RunState
from server.models import Run, utcnow
from server.runstate import REQUEUEABLE_STATES
from server.scheduler import Scheduler, SchedulerError, SchedulerUnavailable
from server.services import submission
from server.services.dependencies import UNFINISHED, nothing_to_infer

log = logging.getLogger(__name__)

# A training run that ended as Slurm may still requeue (preempted, node failure) is given this long to be taken back
# before the runs waiting for it are cancelled (as the monitor keeps following it: its REQUEUE_WINDOW).
REQUEUE_GRACE = timedelta(minutes=10)
# What Slurm says of a job it ended because its dependency can never be met (--kill-on-invalid-dep).
DEPENDENCY_REASONS = ("Dependency", "DependencyNeverSatisfied")
# A dependent run not yet started: afterok starts none before its training completed.
_QUEUED = (RunState.submitted, RunState.pending)


def _settled(training: Run) -> bool:
    """Whether a training run that did not complete will not run again: Slurm may still requeue some ends."""
    if training.state not in REQUEUEABLE_STATES or training.ended_at is None:
        return True
    ended = training.ended_at if training.ended_at.tzinfo else training.ended_at.replace(tzinfo=UTC)
    return utcnow() - ended > REQUEUE_GRACE


def end_dependents(engine: Engine, scheduler: Scheduler) -> None:
    """Each cycle, after the poll: the runs that waited for a training run that ended without completing are ended
    saying so. Those Slurm cancelled (--kill-on-invalid-dep) get the reason; those still waiting (a backend that
    did not cancel them, or held back for a slot) are cancelled with it. One query; nothing where no run waits."""
    training = aliased(Run)
    with Session(engine) as session:
        rows = session.exec(
            select(Run, training)
            .join(training, col(training.id) == col(Run.after_run))
            .where(
                col(Run.after_run).is_not(None),
                col(Run.scheduler) == scheduler.name,
                col(training.state).in_(UNFINISHED),
                or_(
                    col(Run.state).in_(_QUEUED),
                    col(Run.waiting),
                    (col(Run.state) == RunState.cancelled)
                    & col(Run.message).is_(None)
                    & col(Run.scheduler_reason).in_(DEPENDENCY_REASONS),
                ),
            )
        ).all()
        for run, ended in rows:
            why = nothing_to_infer(ended)
            if run.state is RunState.cancelled:
                run.message = why
                session.add(run)
            elif run.message != why and _settled(ended):
                try:
                    submission.stop_unstarted(session, run, scheduler, why)
                except SchedulerUnavailable:
                    raise
                except SchedulerError as exc:
                    log.warning("run %s: its training run %s ended, but its job could not be cancelled: %s",
                                run.id, ended.id, exc)  # fmt: skip
                    continue
            log.info("run %s: %s", run.id, why)
        session.commit()
