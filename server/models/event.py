"""A run's course as append-only events: each submission, state change, requeue and cancellation, and its output
refused."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel
from sqlmodel import Field as SQLField
from sqlmodel import SQLModel

from contract.states import RunState
from server.models.common import utcnow


class RunEventKind(StrEnum):
    submitted = "submitted"
    submit_failed = "submit_failed"
    state = "state"
    requeued = "requeued"
    cancel_requested = "cancel_requested"
    resubmitted = "resubmitted"
    reconciled = "reconciled"
    # Its output could not be read on (a FIFO, a link, a device, another user's file, truncated or replaced): the
    # detail says what; reading it stopped there (migration 0014).
    output_refused = "output_refused"
    ingest_stopped = "ingest_stopped"  # its output is read no further (migration 0015)
    # No new record for longer than its bound: its ranks were asked for their stacks (migration 0018).
    stalled = "stalled"
    hang_cancelled = "hang_cancelled"  # cancelled by the hang watchdog after its stacks were read (on_hang: cancel)


class RunEventBase(SQLModel):
    at: datetime = SQLField(default_factory=utcnow)
    kind: RunEventKind
    job_id: str | None = None
    state: RunState | None = None
    scheduler_state: str | None = None
    detail: str | None = SQLField(default=None, description="Slurm's reason or our message")


class RunEvent(RunEventBase, table=True):
    """The course of a run: each submission, state change, requeue and cancellation, for its page."""

    id: int | None = SQLField(default=None, primary_key=True)
    run_id: str = SQLField(foreign_key="run.id", index=True)


class RunEventsPublic(BaseModel):
    data: list[RunEventBase]
    count: int
