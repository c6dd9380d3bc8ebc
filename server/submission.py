"""Turning an experiment request into run directories, batch scripts and submitted jobs."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from sqlmodel import Session

from server import rundir
from server.config import Settings
from server.models import Experiment, ExperimentCreate, Run, RunState, utcnow
from server.render import BatchJob, render_script
from server.scheduler import Scheduler, SchedulerError
from server.sweep import expand
from worker.spec import RunSpec

log = logging.getLogger(__name__)


# Stands for the run id in a previewed script: ids are given when runs are created.
PREVIEW_RUN_ID = "RUN_ID"


def batch_job(run_id: str, run_dir: Path, time_limit: str, settings: Settings, scheduler: Scheduler) -> BatchJob:
    return BatchJob(
        run_id=run_id,
        run_dir=run_dir,
        time_limit=time_limit,
        worker_python=settings.worker_python,
        launcher="srun" if scheduler.name == "slurm" else "local",
        partition=settings.partition,
    )


def preview_script(spec: RunSpec, time_limit: str, settings: Settings, scheduler: Scheduler) -> str:
    """The batch script a run of this spec would get, with a placeholder for its id; nothing is written."""
    run_dir = rundir.path(settings.runs_dir, PREVIEW_RUN_ID)
    return render_script(spec, batch_job(PREVIEW_RUN_ID, run_dir, time_limit, settings, scheduler))


@contextlib.contextmanager
def committed_with_directories(session: Session, runs: list[Run]) -> Iterator[None]:
    """Commit what the block stages; if anything fails, keep nothing: neither rows nor the directories of `runs`
    (the block appends each run once its directory is complete)."""
    try:
        yield
        session.commit()
    except BaseException:
        session.rollback()
        for run in runs:
            rundir.remove(Path(run.run_dir))
        raise


def create_experiment(
    session: Session, request: ExperimentCreate, settings: Settings, scheduler: Scheduler
) -> tuple[Experiment, list[Run]]:
    """Store the experiment and its runs with their files, then submit each run.

    Raises SweepError before anything is written if any combination cannot run. If writing fails,
    nothing is kept: neither rows nor directories.
    """
    specs = expand(request.base, request.grid, request.resources.nodes)
    experiment = Experiment(name=request.name, request=request.model_dump(mode="json", exclude_none=True))
    runs: list[Run] = []
    with committed_with_directories(session, runs):
        for position, spec in enumerate(specs):
            runs.append(_prepare_run(experiment, position, spec, request.resources.time_limit, settings, scheduler))
        session.add(experiment)
        session.add_all(runs)
    for run in runs:
        submit_run(session, run, scheduler)
    session.refresh(experiment)
    return experiment, runs


def _prepare_run(
    experiment: Experiment, position: int, spec: RunSpec, time_limit: str, settings: Settings, scheduler: Scheduler
) -> Run:
    run = Run(
        experiment_id=experiment.id,
        position=position,
        created_at=experiment.created_at,  # one instant per experiment: listings then keep grid order
        scheduler=scheduler.name,
        spec=spec.model_dump(mode="json"),
        run_dir="",
    )
    run_dir = rundir.create(settings.runs_dir, run.id)
    run.run_dir = str(run_dir)
    try:
        rundir.write_atomic(run_dir / rundir.SPEC_FILE, spec.model_dump_json(indent=2) + "\n")
        script = render_script(spec, batch_job(run.id, run_dir, time_limit, settings, scheduler))
        rundir.write_atomic(run_dir / rundir.SCRIPT_FILE, script, mode=0o755)
    except BaseException:
        rundir.remove(run_dir)
        raise
    return run


def submit_run(session: Session, run: Run, scheduler: Scheduler) -> None:
    run_dir = Path(run.run_dir)
    try:
        run.job_id = scheduler.submit(run_dir / rundir.SCRIPT_FILE, run_dir)
    except SchedulerError as exc:
        log.warning("run %s: submission failed: %s", run.id, exc)
        run.state = RunState.submit_failed
        run.message = str(exc)
        run.ended_at = utcnow()
    else:
        run.state = RunState.submitted
        run.submitted_at = utcnow()
    session.add(run)
    session.commit()
    session.refresh(run)
