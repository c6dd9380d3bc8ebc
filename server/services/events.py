"""A run's course as events: submissions, state changes, requeues and cancellations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert
from sqlmodel import Session, col, select

from server.models import Run, RunEvent, RunEventKind, utcnow


def _event(run: Run, kind: RunEventKind, detail: str | None) -> dict[str, Any]:
    """An event with the run's job and states as they are now."""
    return {
        "at": utcnow(),
        "run_id": run.id,
        "kind": kind,
        "job_id": run.job_id,
        "state": run.state,
        "scheduler_state": run.scheduler_state,
        "detail": detail,
    }


def record(session: Session, run: Run, kind: RunEventKind, detail: str | None = None) -> None:
    """Stage an event with the run's job and states as they are now; the caller commits."""
    session.add(RunEvent(**_event(run, kind, detail)))


def record_all(session: Session, events: Sequence[tuple[Run, RunEventKind, str | None]]) -> None:
    """Write many runs' events in one statement, in the caller's transaction: a poll may move thousands of runs at
    once, and an ORM object per event cost a quarter of a millisecond each."""
    if events:
        session.exec(insert(RunEvent), params=[_event(run, kind, detail) for run, kind, detail in events])


def jobs_before(session: Session, run_ids: Sequence[str]) -> list[tuple[str, str]]:
    """The jobs the runs had, as (run id, job id), from their events: each keeps the run's job as it was then."""
    if not run_ids:
        return []
    rows = session.exec(
        select(RunEvent.run_id, RunEvent.job_id)
        .where(col(RunEvent.run_id).in_(run_ids), col(RunEvent.job_id).is_not(None))
        .distinct()
    ).all()
    return [(run_id, job_id) for run_id, job_id in rows if job_id is not None]
