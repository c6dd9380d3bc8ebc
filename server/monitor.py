"""Following the jobs: one poll of the scheduler per cycle for all live runs, then the new metric lines."""

from __future__ import annotations

import asyncio
import logging
import time

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from server.ingest import ingest
from server.models import LIVE_STATES, Run, RunState, utcnow
from server.scheduler import JobStatus, Scheduler, SchedulerError

log = logging.getLogger(__name__)


def apply_status(run: Run, status: JobStatus) -> bool:
    """Record the scheduler's view of a run; True if anything changed."""
    changed = (run.state, run.scheduler_state, run.scheduler_reason) != (
        status.state,
        status.raw_state,
        status.reason,
    )
    if status.state is RunState.running and run.started_at is None:
        run.started_at = utcnow()
    if status.state.is_final and not run.state.is_final:
        run.ended_at = utcnow()
        run.exit_code = status.exit_code
    if changed:
        log.info("run %s (job %s): %s -> %s (%s)", run.id, run.job_id, run.state, status.state, status.raw_state)
    run.state, run.scheduler_state, run.scheduler_reason = status.state, status.raw_state, status.reason
    return changed


class Monitor:
    def __init__(self, engine: Engine, scheduler: Scheduler, interval_s: float) -> None:
        self.engine = engine
        self.scheduler = scheduler
        self.interval_s = interval_s
        self.last_cycle_s: float | None = None

    def poll_states(self) -> None:
        with Session(self.engine) as session:
            live = session.exec(
                select(Run).where(
                    col(Run.state).in_(LIVE_STATES),
                    col(Run.job_id).is_not(None),
                    Run.scheduler == self.scheduler.name,
                )
            ).all()
            if not live:
                return
            try:
                statuses = self.scheduler.poll([run.job_id for run in live if run.job_id])
            except SchedulerError as exc:
                # The controller may be restarting: keep every state as it is and ask again next cycle.
                log.warning("cannot poll the scheduler, keeping the last known states: %s", exc)
                return
            for run in live:
                status = statuses.get(run.job_id or "")
                if status is not None and apply_status(run, status):
                    session.add(run)
            session.commit()

    def ingest_metrics(self) -> None:
        with Session(self.engine) as session:
            run_ids = session.exec(
                select(Run.id).where(
                    Run.ingest_done == False,  # noqa: E712  (SQL, not Python, comparison)
                    col(Run.state).not_in([RunState.created, RunState.submit_failed]),
                )
            ).all()
        for run_id in run_ids:
            # One transaction per run: its records and its new offset are stored together or not at all.
            with Session(self.engine) as session:
                run = session.get(Run, run_id)
                if run is None:
                    continue
                final = run.state.is_final  # read before ingesting: lines written before the end are all there
                while ingest(session, run):
                    session.commit()
                if final:
                    run.ingest_done = True
                    session.add(run)
                session.commit()

    def cycle(self) -> None:
        started = time.perf_counter()
        self.poll_states()
        self.ingest_metrics()
        self.last_cycle_s = time.perf_counter() - started

    async def run_forever(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.cycle)
            except Exception:
                log.exception("monitor cycle failed; trying again in %.1f s", self.interval_s)
            await asyncio.sleep(self.interval_s)
