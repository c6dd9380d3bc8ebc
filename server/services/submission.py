"""Turning an experiment plan into run directories, batch scripts and submitted jobs."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from sqlmodel import Session, func, select

from contract.rundir import PROMPTS_FILE, SCRIPT_FILE, SPEC_FILE
from contract.spec import RunSpec
from contract.states import RunState
from server.config import Settings
from server.models import RESUBMITTABLE_STATES, Experiment, ExperimentCreate, Run, RunEventKind, utcnow
from server.profiles import Runtime
from server.render import BatchJob, render_script
from server.scheduler import Scheduler, SchedulerError, SchedulerUnavailable
from server.services import history, rundirs
from server.services.planning import Plan

log = logging.getLogger(__name__)


# Stands for the run id in a previewed script: ids are given when runs are created.
PREVIEW_RUN_ID = "RUN_ID"


class RunNotResubmittable(ValueError):
    """The run is live or completed: only a run that ended without completing is submitted again."""


class RunNotRepeatable(ValueError):
    """The run's image cannot be named exactly, so running it again would not repeat it."""


_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_IMAGE_NAME = re.compile(r"^[A-Za-z0-9_./:#+-]{1,400}$")
# Runtimes whose image the batch script names, so a run can be pinned to a digest there.
PINNABLE_RUNTIMES = (Runtime.podman, Runtime.pyxis, Runtime.apptainer)


def pinned_image(run: Run) -> str:
    """The image the run ran in, named by its digest: `name@sha256:...` (a tag could have moved since)."""
    if run.image is None or run.image_digest is None:
        raise RunNotRepeatable(f"run {run.id} did not record the digest of an image it ran in: it cannot be pinned")
    name = run.image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]  # the tag: the digest names the image now
    if not _DIGEST.match(run.image_digest) or not _IMAGE_NAME.match(name):
        raise RunNotRepeatable(f"run {run.id} recorded an image it cannot be pinned to: {run.image!r}")
    return f"{name}@{run.image_digest}"


def batch_job(
    run_id: str, run_dir: Path, plan: Plan, settings: Settings, scheduler: Scheduler, image: str | None = None
) -> BatchJob:
    worker_python = Path(plan.profile.worker_python) if plan.profile.worker_python else settings.worker_python
    return BatchJob(
        run_id=run_id,
        run_dir=run_dir,
        time_limit=plan.time_limit,
        profile=plan.profile,
        partition=plan.partition,
        worker_python=worker_python,
        launcher="local" if scheduler.name == "local" else "srun",
        sbatch_options=plan.sbatch_options,
        image=image,
    )


def preview_script(plan: Plan, index: int, settings: Settings, scheduler: Scheduler) -> str:
    """The batch script the plan's run `index` would get, with a placeholder for its id; nothing is written."""
    run_dir = rundirs.path(settings.runs_dir, PREVIEW_RUN_ID)
    return render_script(plan.specs[index], batch_job(PREVIEW_RUN_ID, run_dir, plan, settings, scheduler))


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
            rundirs.remove(Path(run.run_dir))
        raise


def create_experiment(
    session: Session, request: ExperimentCreate, plan: Plan, settings: Settings, scheduler: Scheduler, owner: str
) -> tuple[Experiment, list[Run], SchedulerUnavailable | None]:
    """Store the experiment and its runs with their files, then submit the runs its concurrency limit lets through.

    If writing fails, nothing is kept: neither rows nor directories. If the scheduler cannot be reached, the runs
    not yet submitted are kept as `submit_failed`, and the error is returned for the caller to report.
    """
    # Commits below must not expire the rows this function goes on using: reloading a large sweep's runs one by one
    # after each commit took longer than writing them.
    session.expire_on_commit = False
    limit = request.resources.max_concurrent
    experiment = Experiment(
        name=request.name,
        owner=owner,
        request=request.model_dump(mode="json", exclude_none=True),
        max_concurrent=limit,
    )
    runs: list[Run] = []
    with committed_with_directories(session, runs):
        for position, spec in enumerate(plan.specs):
            run = _prepare_run(experiment, position, spec, plan, settings, scheduler, request)
            if limit is not None and position >= limit:
                hold_for_slot(run, limit)
            runs.append(run)
        session.add(experiment)
        session.add_all(runs)
    unavailable = submit_runs(session, [run for run in runs if not run.waiting], scheduler)
    session.refresh(experiment)
    return experiment, runs, unavailable


def _prepare_run(
    experiment: Experiment,
    position: int,
    spec: RunSpec,
    plan: Plan,
    settings: Settings,
    scheduler: Scheduler,
    request: ExperimentCreate,
    image: str | None = None,
) -> Run:
    run = Run(
        experiment_id=experiment.id,
        owner=experiment.owner,
        position=position,
        created_at=experiment.created_at,  # one instant per experiment: listings then keep grid order
        scheduler=scheduler.name,
        profile=plan.profile.name,
        spec=spec.model_dump(mode="json"),
        run_dir="",
    )
    run_dir = rundirs.create(settings.runs_dir, run.id)
    run.run_dir = str(run_dir)
    try:
        rundirs.write_new(run_dir / SPEC_FILE, spec.model_dump_json(indent=2) + "\n")
        if request.inference is not None:
            # The uploaded prompts, as a file the worker reads: they never pass through the batch script.
            rundirs.write_new(run_dir / PROMPTS_FILE, request.inference.prompt_lines())
        script = render_script(spec, batch_job(run.id, run_dir, plan, settings, scheduler, image))
        rundirs.write_new(run_dir / SCRIPT_FILE, script, mode=0o755)
    except BaseException:
        rundirs.remove(run_dir)
        raise
    return run


def hold_for_slot(run: Run, limit: int) -> None:
    """Keep the run back until one of the experiment's `limit` slots frees up; the monitor submits it then."""
    run.waiting = True
    run.message = f"waiting for a slot: at most {limit} runs of this experiment run at once"


def _mark_submit_failed(session: Session, run: Run, message: str) -> None:
    run.state = RunState.submit_failed
    run.message = message
    run.ended_at = utcnow()
    run.waiting = False
    history.record(session, run, RunEventKind.submit_failed, message)
    session.add(run)
    session.commit()


def _script_of(run: Run) -> tuple[Path, Path]:
    run_dir = Path(run.run_dir)
    return run_dir / SCRIPT_FILE, run_dir


def _record_outcome(session: Session, run: Run, outcome: str | SchedulerError) -> None:
    """Stage what submitting the run came to: its job id, or the scheduler's refusal (committed at once)."""
    if isinstance(outcome, SchedulerError):
        run.attempt += 1
        log.warning("run %s: submission failed: %s", run.id, outcome)
        _mark_submit_failed(session, run, str(outcome))
        return
    record_job(session, run, outcome, RunEventKind.submitted)


def record_job(session: Session, run: Run, job_id: str, kind: RunEventKind, detail: str | None = None) -> None:
    """Stage that the run's job `job_id` is in the scheduler, as another attempt of the run."""
    run.attempt += 1
    run.job_id = job_id
    run.state = RunState.submitted
    run.submitted_at = utcnow()
    run.waiting = False
    run.message = None
    history.record(session, run, kind, detail or f"attempt {run.attempt}")
    session.add(run)


def _submit(scheduler: Scheduler, run: Run) -> str | SchedulerError:
    try:
        return scheduler.submit(*_script_of(run))
    except SchedulerError as exc:
        return exc


def submit_run(session: Session, run: Run, scheduler: Scheduler) -> None:
    """Submit one prepared run and record the outcome; raises SchedulerUnavailable (after recording it) when the
    scheduler cannot be reached."""
    outcome = _submit(scheduler, run)
    _record_outcome(session, run, outcome)
    session.commit()
    if isinstance(outcome, SchedulerUnavailable):
        raise outcome


# Submissions of all requests share these threads. A pool per request started its threads under a lock that every
# pool in the process shares: under load, starting threads took most of a submission's time; and this also bounds
# how many sbatch processes the server runs at once, however many users submit.
SUBMISSION_THREADS = 8
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _submission_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=SUBMISSION_THREADS, thread_name_prefix="submit")
        return _pool


# Job ids of a sweep are committed this many at a time: should the server die in between, the next one finds the
# jobs by their names (see Monitor.reconcile), and a commit per job was a quarter of a large sweep's time.
COMMIT_EVERY = 20


def submit_runs(session: Session, runs: list[Run], scheduler: Scheduler) -> SchedulerUnavailable | None:
    """Submit runs in grid order, up to the scheduler's `submit_concurrency` at a time, recording each outcome.

    Once the scheduler is unreachable, no more are started: the rest are kept as submit_failed untried (each would
    wait as long), and those already under way are recorded as they turn out.
    """
    unavailable: SchedulerUnavailable | None = None
    queue = deque(runs)
    under_way: deque[tuple[Run, Future[str | SchedulerError]]] = deque()
    recorded = 0
    # Only the submissions run in the pool: the session stays in this thread.
    pool = _submission_pool()
    while queue or under_way:
        while queue and unavailable is None and len(under_way) < scheduler.submit_concurrency:
            run = queue.popleft()
            under_way.append((run, pool.submit(_submit, scheduler, run)))
        if not under_way:
            break
        run, future = under_way.popleft()
        outcome = future.result()
        if isinstance(outcome, SchedulerUnavailable) and unavailable is None:
            unavailable = outcome
        _record_outcome(session, run, outcome)
        recorded += 1
        if recorded % COMMIT_EVERY == 0:
            session.commit()
    for untried in queue:
        _mark_submit_failed(session, untried, f"not submitted: {unavailable}")
    session.commit()
    return unavailable


def resubmit_run(session: Session, run: Run, experiment: Experiment, scheduler: Scheduler) -> None:
    """Submit a run that ended without completing again, with the same spec and script, in the same directory:
    the worker resumes from the run's last checkpoint if it has one. Within a concurrency limit, it waits for a
    slot like the experiment's other runs. Raises RunNotResubmittable, or SchedulerUnavailable (after recording)."""
    if run.state not in RESUBMITTABLE_STATES:
        why = "it is still live: cancel it first" if not run.state.is_final else "it completed: clone it instead"
        raise RunNotResubmittable(f"run {run.id} cannot be resubmitted: {why}")
    history.record(session, run, RunEventKind.resubmitted, f"after {run.state}")
    run.state = RunState.created
    run.scheduler = scheduler.name
    run.job_id = run.scheduler_state = run.scheduler_reason = run.exit_code = run.message = None
    run.started_at = run.ended_at = run.submitted_at = None
    run.ingest_done = False  # the output file grows again from where it was read
    run.waiting = False
    if experiment.max_concurrent is not None:
        hold_for_slot(run, experiment.max_concurrent)
    session.add(run)
    session.commit()
    if not run.waiting:
        submit_run(session, run, scheduler)


def rerun(
    session: Session, original: Run, experiment: Experiment, plan: Plan, settings: Settings, scheduler: Scheduler
) -> Run:
    """A new run of the experiment with the original's spec, on the image it ran in, named by its digest.

    Raises RunNotRepeatable when that image cannot be named exactly, or SchedulerUnavailable (after recording)."""
    if plan.profile.container.runtime not in PINNABLE_RUNTIMES:
        raise RunNotRepeatable(
            f"cluster profile {plan.profile.name} runs the worker with runtime {plan.profile.container.runtime}, "
            "whose image the batch script does not name: it cannot be pinned to a digest"
        )
    image = pinned_image(original)
    last = session.exec(select(func.max(Run.position)).where(Run.experiment_id == experiment.id)).one()
    spec = RunSpec.model_validate(original.spec)
    request = ExperimentCreate.model_validate(experiment.request)  # an inference run's prompts come with it
    run = _prepare_run(experiment, (last or 0) + 1, spec, plan, settings, scheduler, request, image)
    run.owner, run.rerun_of, run.created_at = original.owner, original.id, utcnow()
    if experiment.max_concurrent is not None:
        hold_for_slot(run, experiment.max_concurrent)
    with committed_with_directories(session, [run]):
        session.add(run)
    if not run.waiting:
        submit_run(session, run, scheduler)
    return run
