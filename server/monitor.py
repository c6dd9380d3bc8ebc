"""Following the jobs, the loop only: each cycle one poll of the scheduler for all live runs, their new states,
the runs waiting for a slot released, one accounting call for the runs that ended, the runs waiting for a training
that failed ended, then the new metric lines read, then the failed runs read to their end classified, and the
running runs watched for a hang; the rules are the services' and runstate's."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol, cast

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from contract.states import RunState
from server.lease import Lease
from server.models import Run, RunEventKind, utcnow
from server.runstate import (
    LIVE_STATES,
    REQUEUEABLE_STATES,
    SchedulerView,
    apply_status,
    end_unknown,
    status_unchanged,
)
from server.scheduler import Job, JobStatus, Scheduler, SchedulerError, states
from server.scheduler.naming import is_array_task, job_name
from server.services import accounting, dependents, events, failed_runs, hangs, ingestion, notifications, submission
from server.services.fabric import Reference
from server.services.hangs import DEFAULT_HANG_RULES, HangRules
from server.services.ingestion import DEFAULT_LIMITS, OutputLimits
from server.telemetry import Histogram

log = logging.getLogger(__name__)

# How long after a preemption or node failure Slurm may still requeue the job: the monitor keeps asking.
REQUEUE_WINDOW = timedelta(minutes=10)
# The longest wait between polls while the scheduler cannot be reached.
MAX_BACKOFF_S = 60.0
# How long a live run's job may be unknown to the scheduler (neither in its queue nor in its accounting) before
# the run ends saying so: slurmdbd may lag behind a job that just left the queue, or be catching up after an
# outage, but a job unknown for this long will not be known again (settings.unknown_job_after_s).
UNKNOWN_JOB_AFTER = timedelta(minutes=10)


class Monitor:
    def __init__(
        self,
        engine: Engine,
        scheduler: Scheduler,
        interval_s: float,
        unknown_job_after: timedelta = UNKNOWN_JOB_AFTER,
        limits: OutputLimits = DEFAULT_LIMITS,
        hang_rules: HangRules = DEFAULT_HANG_RULES,
        fabric_references: Mapping[str, Reference] | None = None,
    ) -> None:
        self.engine = engine
        # Each profile's fabric_reference, by profile name: what its runs' pre-flights are judged against.
        self.fabric_references = fabric_references or {}
        self.limits = limits
        self.hang_rules = hang_rules
        self.scheduler = scheduler
        self.interval_s = interval_s
        self.unknown_job_after = unknown_job_after
        # Since when (monotonic clock) each live run's job has been missing from every answer of the scheduler,
        # without a break: counted from this process's start after a restart, which only delays the end.
        self.unknown_since: dict[str, float] = {}
        self.last_cycle_s: float | None = None
        self.cycle_seconds = Histogram(
            "scalelab_monitor_cycle_seconds",
            "Duration of the monitor's cycles (one scheduler poll, then the new metric lines).",
            (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        # When each run's ingested records last reached the end of its output file (monotonic clock): how far
        # behind ingestion is, in time, for /metrics.
        self.caught_up: dict[str, float] = {}
        self.started_monotonic = time.monotonic()
        self.started_at = utcnow()
        self.reconciled = False
        self.scheduler_failures = 0
        self._next_poll = 0.0

    # ---- the scheduler's side ----------------------------------------------------------------------------------

    def _followed(self, session: Session) -> Sequence[FollowedRow]:
        """Live runs, and runs that Slurm may still requeue: only the columns a poll compares. Thousands of live runs
        are followed each cycle, most of them unchanged; only those whose job changed are read whole."""
        recent = utcnow() - REQUEUE_WINDOW
        # SQLAlchemy's own select, on the session's connection: SQLModel's types a select of at most four columns.
        # Its rows have the columns as attributes, as FollowedRow says.
        columns = (Run.id, Run.job_id, Run.created_at, Run.state, Run.scheduler_state, Run.scheduler_reason, Run.nodes)
        rows = (
            session.connection()
            .execute(
                sa.select(*(col(column) for column in columns)).where(
                    col(Run.job_id).is_not(None),
                    col(Run.scheduler) == self.scheduler.name,
                    col(Run.state).in_(LIVE_STATES)
                    | (col(Run.state).in_(REQUEUEABLE_STATES) & (col(Run.ended_at) > recent)),
                )
            )
            .all()
        )
        return cast("Sequence[FollowedRow]", rows)

    def poll_states(self) -> None:
        with Session(self.engine) as session:
            followed = self._followed(session)
            jobs = {row.id: job_of(row) for row in followed}
            statuses = self.scheduler.poll(list(jobs.values())) if followed else {}
            changed: dict[str, JobStatus] = {}
            unknown_for: dict[str, float] = {}  # runs whose job has been unknown too long, and for how long
            for row in followed:
                status = statuses.get(jobs[row.id])
                if status is None:
                    waited = self._unknown_for(row.id, row.state)
                    if waited is not None:
                        unknown_for[row.id] = waited
                    continue
                self.unknown_since.pop(row.id, None)
                if not status_unchanged(row, status) or (status.nodes and status.nodes != row.nodes):
                    changed[row.id] = status
            happened: list[tuple[Run, RunEventKind, str | None]] = []
            ended: list[Run] = []  # runs that were live and have ended now: their experiments may have ended
            for run in session.exec(select(Run).where(col(Run.id).in_([*changed, *unknown_for]))).all():
                if run.id in unknown_for:
                    self._end_unknown(session, run, unknown_for[run.id])
                    ended.append(run)
                    continue
                status = changed[run.id]
                if status.nodes and status.nodes != run.nodes:
                    run.nodes = status.nodes  # known before the job ends: accounting asks Slurm about these nodes
                    session.add(run)
                before = run.state
                event = apply_status(run, status)
                if event is not None:
                    log.info("run %s (job %s): %s -> %s (%s)", run.id, run.job_id, before, run.state, status.raw_state)
                    happened.append((run, event, status.reason))
                    session.add(run)
                    if run.state.is_final and not before.is_final:
                        ended.append(run)
            events.record_all(session, happened)
            # Told in the same transaction as the runs' ends: queued here, sent by the delivery loop.
            notifications.experiments_ended(session, ended)
            session.commit()
        for gone in self.unknown_since.keys() - jobs.keys():
            del self.unknown_since[gone]

    def _unknown_for(self, run_id: str, state: RunState) -> float | None:
        """A run whose job the scheduler did not answer for is asked about again, until it has been unknown too
        long: then how long it has been."""
        if state not in LIVE_STATES:
            return None  # ended; followed only in case Slurm requeues it
        since = self.unknown_since.setdefault(run_id, time.monotonic())
        waited = time.monotonic() - since
        return waited if waited >= self.unknown_job_after.total_seconds() else None

    def _end_unknown(self, session: Session, run: Run, waited: float) -> None:
        message = states.unknown_job_message(run.job_id or "", self.scheduler.name, waited)
        log.warning("run %s: %s", run.id, message)
        events.record(session, run, end_unknown(run, message), message)
        session.add(run)
        del self.unknown_since[run.id]

    def follow_scheduler(self) -> None:
        """Everything that asks the scheduler, backing off while it cannot be reached."""
        if time.monotonic() < self._next_poll:
            return
        try:
            if not self.reconciled:
                submission.reconcile(self.engine, self.scheduler, self.started_at)
                self.reconciled = True
            self.poll_states()
            submission.release_waiting(self.engine, self.scheduler)
            accounting.account_ended(self.engine, self.scheduler)
            dependents.end_dependents(self.engine, self.scheduler)
        except SchedulerError as exc:
            # The controller may be restarting: keep every state as it is and ask again, less often.
            self.scheduler_failures += 1
            delay = min(self.interval_s * 2**self.scheduler_failures, MAX_BACKOFF_S)
            self._next_poll = time.monotonic() + delay
            log.warning("cannot reach the scheduler (%d times); asking again in %.0f s: %s",
                        self.scheduler_failures, delay, exc)  # fmt: skip
            return
        if self.scheduler_failures:
            log.info("the scheduler answers again after %d failed attempts", self.scheduler_failures)
        self.scheduler_failures = 0

    # ---- the jobs' output --------------------------------------------------------------------------------------

    def ingest_metrics(self) -> None:
        """The runs' new metric lines, read by ingestion; when each run's records last reached its file's end, kept
        for /metrics."""
        followed = ingestion.ingest_runs(self.engine, self._caught_up, self.limits, self.fabric_references)
        for gone in self.caught_up.keys() - followed:
            del self.caught_up[gone]

    def _caught_up(self, run_id: str) -> None:
        self.caught_up[run_id] = time.monotonic()

    def cycle(self) -> None:
        started = time.perf_counter()
        self.follow_scheduler()
        self.ingest_metrics()
        # Once a failed run's output is read to its end: its failure kind, and its experiment's on_failure.
        failed_runs.classify_ended(self.engine, self.scheduler)
        # Ended experiments whose owners want to hear of a regression, once their runs are read to their end.
        notifications.check_regressions(self.engine)
        if self.scheduler_failures == 0:  # a scheduler that cannot be reached can neither signal nor cancel
            hangs.watch(self.engine, self.scheduler, self.hang_rules)
        self.last_cycle_s = time.perf_counter() - started
        self.cycle_seconds.observe(self.last_cycle_s)
        log.debug("monitor cycle took %.3f s", self.last_cycle_s)

    async def run_forever(self, lease: Lease | None = None) -> None:
        """A cycle every interval while this process holds the lease (always, without one): of several processes
        sharing the database, only the holder follows the jobs, and the others stand by to take over."""
        if lease is not None:
            await asyncio.to_thread(lease.ask)
        keeping = asyncio.create_task(lease.keep()) if lease is not None else None
        try:
            while True:
                if lease is not None and not lease.held:
                    await asyncio.sleep(lease.timing.period_s)
                    continue
                started = time.monotonic()
                try:
                    await asyncio.to_thread(self.cycle)
                except Exception:
                    log.exception("monitor cycle failed; trying again in %.1f s", self.interval_s)
                await asyncio.sleep(pause_after(self.interval_s, time.monotonic() - started))
        finally:
            if keeping is not None and lease is not None:
                keeping.cancel()
                lease.release()


def pause_after(interval_s: float, cycle_s: float) -> float:
    """How long to wait after a cycle that took `cycle_s`: cycles start an interval apart (a pause of a whole interval
    after each made the period interval + cycle, and a printed line waited that much longer to be stored: 0.4 s more
    of the live-lag benchmark's 1.4 s), but a cycle longer than the interval still leaves the process a tenth of one
    before the next, so that a slow database is not asked again at once."""
    return max(interval_s - cycle_s, interval_s / 10)


class FollowedRow(SchedulerView, Protocol):
    """The columns of a followed run that a poll reads (see Monitor._followed)."""

    id: str
    job_id: str | None
    created_at: datetime
    nodes: str | None


def job_of(run: FollowedRow | Run) -> Job:
    """The run's job as the scheduler is asked about it: its id, the name scalelab gave it, and no submission
    before the run was made, so that an older job under the same id is not taken for it."""
    created = run.created_at if run.created_at.tzinfo else run.created_at.replace(tzinfo=UTC)  # SQLite drops the zone
    job_id = run.job_id or ""
    # An array's tasks share the array's name: the submit time alone tells an older job of the same id apart.
    return Job(job_id, None if is_array_task(job_id) else job_name(run.id), created)
