"""A run's course as events: submissions, state changes, requeues and cancellations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert
from sqlmodel import Session

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
