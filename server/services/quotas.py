"""Per-user quotas, checked when runs are about to be submitted: runs not yet ended, their GPUs, runs per day.

The check and the insert of the runs it admits are one step per user: the check takes a lock of the user's that
the caller's transaction holds until it commits the new runs (or rolls back). Without it, concurrent submissions
each counted the others' runs as not there yet, and 20 at once under a quota of 2 runs got 11 accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import Connection
from sqlmodel import Session, col, func, select

from contract.spec import RunSpec
from contract.states import FINAL_STATES
from server.config import Settings
from server.errors import OverQuota
from server.models import Run, User, utcnow

DAY = timedelta(days=1)


class QuotaExceeded(OverQuota):
    """The runs would take the user beyond a quota: nothing is created or submitted."""

    def __init__(self, message: str, retry_after_s: int | None = None, outcome: str = "Nothing was submitted.") -> None:
        super().__init__(f"{message} {outcome}", retry_after_s)


def _limit(user: User, settings: Settings, name: str) -> int | None:
    own: int | None = getattr(user, name)
    return own if own is not None else getattr(settings, name)


def _lock_user(session: Session, user: User) -> None:
    """Hold the user's quota lock until the session's transaction ends, so that the runs counted below and those the
    caller then inserts are seen whole by the next check. SQLite: the database's write lock, taken at once (BEGIN
    IMMEDIATE), as SQLite has no lock of a row; a transaction that already wrote holds it already. PostgreSQL: the
    user's row, locked FOR UPDATE: other users' submissions go on meanwhile."""
    connection: Connection = session.connection()
    if connection.dialect.name == "sqlite":
        driver = connection.connection.driver_connection
        # Python's sqlite3 opens a (deferred) transaction of its own before a write only, and none is open here
        # unless this session wrote already.
        if driver is not None and not driver.in_transaction:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        return
    session.exec(select(User.name).where(User.name == user.name).with_for_update()).one()


def check_quotas(session: Session, user: User, settings: Settings, specs: Sequence[RunSpec], *, new: bool) -> None:
    """Raise QuotaExceeded if these runs (new ones, or old ones submitted again) would take the user beyond a quota.

    Where a quota applies, the user's quota lock is held from here until the session's transaction ends: the caller
    commits the runs it checked in that same transaction."""
    active = (col(Run.owner) == user.name) & col(Run.state).not_in(FINAL_STATES)
    most_runs = _limit(user, settings, "max_concurrent_runs")
    most_gpus = _limit(user, settings, "max_gpus_in_use")
    most_per_day = _limit(user, settings, "max_runs_per_day")
    if most_runs is not None or most_gpus is not None or (new and most_per_day is not None):
        _lock_user(session, user)
    if most_runs is not None or most_gpus is not None:
        # Both figures of the runs not yet ended in one query: a submission's quota checks were a quarter of its cost.
        gpus = func.coalesce(func.sum(col(Run.spec)["gpus"].as_integer()), 0)
        running, in_use = session.exec(select(func.count(), gpus).where(active)).one()
        if most_runs is not None and running + len(specs) > most_runs:
            raise QuotaExceeded(
                f"quota: {user.name} may have {most_runs} runs not yet ended; {running} are, and this adds "
                f"{len(specs)}. Wait for some to end, cancel some, or ask an admin to raise max_concurrent_runs."
            )
        asked = sum(spec.gpus for spec in specs)
        if most_gpus is not None and in_use + asked > most_gpus:
            raise QuotaExceeded(
                f"quota: {user.name} may use {most_gpus} GPUs at once; runs not yet ended hold {in_use}, and this "
                f"asks for {asked} more. Wait for runs to end, or ask an admin to raise max_gpus_in_use."
            )
    if new:
        _check_per_day(session, user, settings, len(specs), "Nothing was submitted.")


def check_import_quota(session: Session, user: User, settings: Settings, runs: int) -> None:
    """Raise QuotaExceeded if importing `runs` runs would take the user beyond the runs a day: imported runs are runs
    created (they hold rows and records as submitted ones do), though they hold no GPU and never run. The quota lock
    is held as for a submission, until the caller's transaction commits the imported runs."""
    if _limit(user, settings, "max_runs_per_day") is not None:
        _lock_user(session, user)
    _check_per_day(session, user, settings, runs, "Nothing was imported.")


def _check_per_day(session: Session, user: User, settings: Settings, count: int, outcome: str) -> None:
    most_per_day = _limit(user, settings, "max_runs_per_day")
    if most_per_day is not None:
        since = utcnow() - DAY
        in_window = (col(Run.owner) == user.name) & (col(Run.created_at) >= since)
        # Counted by the database; the runs' times are read only to say when a refused user may try again.
        recent = session.exec(select(func.count()).where(in_window)).one()
        if recent + count > most_per_day:
            # The quota frees up as the oldest runs of the window leave it.
            needed = recent + count - most_per_day
            oldest_needed = (
                session.exec(
                    select(Run.created_at).where(in_window).order_by(col(Run.created_at)).offset(needed - 1).limit(1)
                ).first()
                if needed <= recent
                else None
            )
            frees_at = None if oldest_needed is None else oldest_needed + DAY
            wait = None if frees_at is None else max(1, int((frees_at - utcnow()).total_seconds()))
            when = f"try again in {_duration(wait)}" if wait else "it asks for more runs than the quota itself"
            raise QuotaExceeded(
                f"quota: {user.name} may create {most_per_day} runs in 24 hours; {recent} were, and this adds "
                f"{count}: {when}, or ask an admin to raise max_runs_per_day.",
                wait,
                outcome,
            )


def _duration(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours} h {rest // 60} min" if hours else f"{max(1, rest // 60)} min"
