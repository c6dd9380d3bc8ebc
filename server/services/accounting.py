"""Resource use of ended runs from the scheduler's accounting, and which other jobs shared their nodes: one
scheduler call per monitor cycle for all the runs that ended since."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from contract.states import FINAL_STATES
from server.models import GATHERABLE, Run, RunAccounting, utcnow
from server.scheduler import EndedJob, JobAccounting, Scheduler
from server.scheduler.naming import is_array_task, job_name

log = logging.getLogger(__name__)

# How long after a run's end it is first asked about: slurmdbd answers a query by nodes and time a few seconds
# after a job ended (2-4 s measured here, on an idle database) and before that leaves the job out, so a job that
# shared the nodes and ended with the run would be missed, and a run's row is written once.
SETTLE = timedelta(seconds=30)
# Runs accounted for per cycle, oldest end first: bounds the sacct call and its answer after an outage.
BATCH = 200
# How long after a run's end its job may still be missing from the accounting database (slurmdbd lags, or was
# down) before the run gets a row saying so instead of figures, so that it is not asked about forever.
GIVE_UP_AFTER = timedelta(hours=1)
_GIVE_UP_TEXT = "an hour"


def cpu_efficiency(total_cpu_s: float, elapsed_s: int, alloc_cpus: int) -> float | None:
    """CPU time used over CPU time allocated; None for a job that ran no time."""
    allocated = elapsed_s * alloc_cpus
    return total_cpu_s / allocated if allocated > 0 else None


def row_of(run_id: str, job_id: str, figures: JobAccounting) -> RunAccounting:
    """The run's accounting row from the scheduler's figures; a figure it did not gather is named in not_gathered."""
    row = RunAccounting(
        run_id=run_id, job_id=job_id, nodes=figures.nodes, start=figures.start, end=figures.end,
        elapsed_s=figures.elapsed_s, alloc_cpus=figures.alloc_cpus, total_cpu_s=figures.total_cpu_s,
        cpu_efficiency=cpu_efficiency(figures.total_cpu_s, figures.elapsed_s, figures.alloc_cpus),
        max_rss_bytes=figures.max_rss_bytes, gpu_util=figures.gpu_util, gpu_mem_bytes=figures.gpu_mem_bytes,
        energy_j=figures.energy_j, shared_with=list(figures.shared_with),
    )  # fmt: skip
    row.not_gathered = [name for name in GATHERABLE if getattr(row, name) is None]
    return row


def _unaccounted(session: Session, scheduler: Scheduler) -> list[Run]:
    """Runs of this scheduler seen on nodes, ended at least SETTLE ago, whose current job has no accounting row;
    oldest end first."""
    return list(
        session.exec(
            select(Run)
            .outerjoin(RunAccounting, col(RunAccounting.run_id) == col(Run.id))
            .where(
                Run.scheduler == scheduler.name,
                col(Run.job_id).is_not(None),
                # A run never seen on a node (it never ran, or a scheduler without nodes: local) has nothing to
                # account: it gets no row, which the pages show as not gathered.
                col(Run.nodes).is_not(None),
                col(Run.state).in_(FINAL_STATES),
                col(Run.ended_at) <= utcnow() - SETTLE,
                col(RunAccounting.run_id).is_(None) | (col(RunAccounting.job_id) != col(Run.job_id)),
            )
            .order_by(col(Run.ended_at))
            .limit(BATCH)
        ).all()
    )


def _aware(moment: datetime) -> datetime:
    """SQLite returns the stored UTC times without their zone."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _ended_job(run: Run) -> EndedJob:
    assert run.job_id and run.nodes and run.ended_at  # noqa: S101 (the query selected only such runs)
    # It cannot have started before it was submitted; started_at is when the monitor first saw it running, later.
    start = run.submitted_at or run.started_at or run.ended_at
    # An array's tasks carry the array's name: the latest record of the task's id is its own.
    name = None if is_array_task(run.job_id) else job_name(run.id)
    return EndedJob(job_id=run.job_id, nodes=run.nodes, start=_aware(start), end=_aware(run.ended_at), name=name)


def account_ended(engine: Engine, scheduler: Scheduler) -> int:
    """Store the accounting of the runs that ended and have none, from ONE scheduler call; how many rows were
    stored. SchedulerError passes through: nothing is stored and the runs are asked about next cycle."""
    with Session(engine) as session:
        runs = _unaccounted(session, scheduler)
        jobs = [_ended_job(run) for run in runs]
    if not jobs:
        return 0
    started = time.perf_counter()
    found = scheduler.accounting(jobs)  # no session is open meanwhile: sacct may take seconds
    log.info("accounting of %d ended jobs: %d found in %.3f s", len(jobs), len(found), time.perf_counter() - started)
    stored = 0
    late = utcnow() - GIVE_UP_AFTER
    with Session(engine) as session:
        for run, job in zip(runs, jobs, strict=True):
            figures = found.get(job.job_id)
            if figures is not None:
                row = row_of(run.id, job.job_id, figures)
            elif job.end < late:
                row = RunAccounting(
                    run_id=run.id, job_id=job.job_id, nodes=job.nodes,
                    message=f"Slurm's accounting had no record of job {job.job_id} {_GIVE_UP_TEXT} after it ended",
                )  # fmt: skip
            else:
                continue  # not in the accounting database yet: asked again next cycle
            session.merge(row)  # replaces the row of a job the run had before a resubmission
            stored += 1
        session.commit()
    return stored
