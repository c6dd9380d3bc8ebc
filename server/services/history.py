"""A run's course as events: submissions, state changes, requeues and cancellations."""

from __future__ import annotations

from sqlmodel import Session

from server.models import Run, RunEvent, RunEventKind


def record(session: Session, run: Run, kind: RunEventKind, detail: str | None = None) -> None:
    """Stage an event with the run's job and states as they are now; the caller commits."""
    session.add(
        RunEvent(
            run_id=run.id,
            kind=kind,
            job_id=run.job_id,
            state=run.state,
            scheduler_state=run.scheduler_state,
            detail=detail,
        )
    )
