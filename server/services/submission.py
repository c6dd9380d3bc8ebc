"""The only place that submits: creating an experiment's runs and submitting them, resubmitting, running again on
a pinned image, rerunning an experiment's failed runs with changes, cancelling, releasing runs that wait for a
slot, and finding the jobs a restarted server missed.

The commands at the end are what the API and the pages ask for: each checks who may (server/runstate.py) and the
owner's quotas before it changes anything.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel import Session, col, func, select

from contract.errors import PROGRAMS_ADMIN_ONLY
from contract.images import DIGEST
from contract.rundir import PROMPTS_FILE, SCRIPT_FILE, SPEC_FILE
from contract.spec import SERVER_FIELDS, RunSpec
from contract.states import FINAL_STATES, RunState
from server.config import Settings
from server.errors import Conflict, Invalid, NotAllowed, SchedulerDown, SchedulerRefused
from server.models import (
    Experiment,
    ExperimentChanges,
    ExperimentCreate,
    FailedRerun,
    RerunPreview,
    RerunPreviewed,
    Run,
    RunEventKind,
    SkippedRun,
    User,
    on_failure_of,
    utcnow,
)
from server.profiles import ProfileCatalog
from server.render import render_script
from server.runstate import (
    FAILED_STATES,
    LIVE_STATES,
    RESUBMITTABLE_STATES,
    failed_not_rerun,
    require_owner,
    why_no_programs,
    why_not_cancel,
    why_not_rerun,
    why_not_resubmit,
)
from server.scheduler import Scheduler, SchedulerError, SchedulerUnavailable
from server.scheduler.naming import is_array_task
from server.services import arrays, dependencies, events, rundirs, secrets
from server.services.experiments import get_experiment
from server.services.planning import Plan, plan_request
from server.services.programs import is_program
from server.services.quotas import check_quotas
from server.services.runs import get_run, runs_of_experiment
from server.services.scripts import batch_job
from server.services.sweep import changed_spec

log = logging.getLogger(__name__)


class RunNotRepeatable(Conflict):
    """The run's image cannot be named exactly, so running it again would not repeat it."""


_IMAGE_NAME = re.compile(r"^[A-Za-z0-9_./:#+-]{1,400}$")


def pinned_image(run: Run) -> str:
    """The image the run ran in, named by its digest: `name@sha256:...` (a tag could have moved since)."""
    if run.image is None or run.image_digest is None:
        raise RunNotRepeatable(f"run {run.id} did not record the digest of an image it ran in: it cannot be pinned")
    name = run.image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]  # the tag: the digest names the image now
    if not DIGEST.match(run.image_digest) or not _IMAGE_NAME.match(name):
        raise RunNotRepeatable(f"run {run.id} recorded an image it cannot be pinned to: {run.image!r}")
    return f"{name}@{run.image_digest}"


@contextlib.contextmanager
def committed_with_directories(session: Session, runs: list[Run]) -> Iterator[None]:
    """Commit what the block stages; if anything fails, keep nothing: neither rows nor the directories of `runs`
    (the block appends each run once its directory is complete), nor, where jobs make their directories, the
    service's copies of their scripts."""
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
    limit = plan.max_concurrent
    experiment = Experiment(
        name=request.name,
        owner=owner,
        request=request.model_dump(mode="json", exclude_none=True),
        max_concurrent=limit,
    )
    runs: list[Run] = []
    with committed_with_directories(session, runs):
        for position, spec in enumerate(plan.specs):
            runs.append(_prepare_run(experiment, position, spec, plan, settings, scheduler, request))
        # Runs that go as one Slurm array are throttled by Slurm (`%K`), none held back by scalelab.
        in_arrays = arrays.choose(runs, settings, scheduler, limit)
        if limit is not None and not in_arrays:
            for run in runs[limit:]:
                hold_for_slot(run, limit, plan.one_at_a_time)
        session.add(experiment)
        session.add_all(runs)
    unavailable = submit_runs(session, [run for run in runs if not run.waiting], scheduler, in_arrays, settings)
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
        partition=plan.partition,
        spec=spec.model_dump(mode="json"),
        run_dir="",
    )
    if plan.after is not None:  # its job waits for the training's (server/services/dependencies.py)
        run.after_run, run.after_job = plan.after.run_id, plan.after.job_id
    prompts = request.inference.prompt_lines() if request.inference is not None else None
    if scheduler.runs_as_user:
        _prepare_script_only(run, spec, plan, settings, scheduler, prompts, image)
        return run
    run_dir = rundirs.create(settings.runs_dir, run.id)
    run.run_dir = str(run_dir)
    try:
        rundirs.write_new(run_dir / SPEC_FILE, spec.model_dump_json(indent=2) + "\n")
        if prompts is not None:
            # The uploaded prompts, as a file the worker reads: they never pass through the batch script.
            rundirs.write_new(run_dir / PROMPTS_FILE, prompts)
        script = render_script(spec, batch_job(run.id, run_dir, spec, plan, settings, scheduler, image))
        rundirs.write_new(run_dir / SCRIPT_FILE, script, mode=0o755)
    except BaseException:
        rundirs.remove(run_dir)
        raise
    return run


def _prepare_script_only(
    run: Run,
    spec: RunSpec,
    plan: Plan,
    settings: Settings,
    scheduler: Scheduler,
    prompts: str | None,
    image: str | None,
) -> None:
    """A run whose job, running as its user, makes its directory: the service writes nothing there (the directory
    is the user's, and does not exist yet). The script carries the spec and prompts; the service keeps it in its
    own .scripts directory, and submits that."""
    run_dir = rundirs.path(settings.runs_dir, run.id)
    run.run_dir = str(run_dir)
    script = render_script(spec, batch_job(run.id, run_dir, spec, plan, settings, scheduler, image, prompts))
    try:
        rundirs.write_service_script(settings.runs_dir, run.id, script)
    except BaseException:
        rundirs.service_script(run_dir).unlink(missing_ok=True)  # if writing it failed half-way; never the directory
        raise


def hold_for_slot(run: Run, limit: int, taking_turns: bool = False) -> None:
    """Keep the run back until one of the experiment's `limit` slots frees up; the monitor submits it then."""
    run.waiting = True
    run.message = (
        "waiting for its turn: the experiment's runs are exclusive and share this cluster's nodes, so they run "
        "one at a time, and their timings do not disturb each other"
        if taking_turns
        else f"waiting for a slot: at most {limit} runs of this experiment run at once"
    )


def _mark_submit_failed(session: Session, run: Run, message: str, *, tried: bool = False) -> None:
    """Stage that the run could not be submitted (`tried`: the scheduler refused it), unless a cancel came first:
    the run then stays cancelled."""
    failed = {"state": RunState.submit_failed, "message": message, "ended_at": utcnow(), "waiting": False}
    if tried:
        failed["attempt"] = run.attempt + 1
    if _still_unsubmitted(session, run, RunState.created, failed):
        events.record(session, run, RunEventKind.submit_failed, message)


def _still_unsubmitted(session: Session, run: Run, expected: RunState, values: dict[str, object]) -> bool:
    """Write `values` to the run only if it is still `expected` and has no job; whether it was.

    Submitting and cancelling are in different requests (and the monitor releases waiting runs): each moves a run
    without a job on only if nobody else moved it first. The check is in the UPDATE itself, so it and the write are
    one step under the database's write lock, wherever the caller read the run; the instance is brought in line
    without being marked for writing again."""
    unsubmitted = (col(Run.id) == run.id, col(Run.state) == expected, col(Run.job_id).is_(None))
    written = session.connection().execute(update(Run).where(*unsubmitted).values(**values))
    if written.rowcount != 1:
        return False
    for name, value in values.items():
        set_committed_value(run, name, value)
    return True


def _script_of(run: Run, scheduler: Scheduler) -> tuple[Path, Path]:
    """The script to submit and the run's directory: the service's copy where the job makes the directory."""
    run_dir = Path(run.run_dir)
    if not scheduler.runs_as_user:
        return run_dir / SCRIPT_FILE, run_dir
    script = rundirs.service_script(run_dir)
    if not script.is_file():
        # A run written by a server that made its directory itself, resubmitted where jobs make their own: the
        # directory is the service's, which the job, running as its user, could not write in.
        raise SchedulerError(
            f"run {run.id} was created before jobs ran as their users ({script} is missing): it cannot be "
            "submitted again as its user; clone its experiment instead"
        )
    return script, run_dir


def _record_outcome(
    session: Session,
    run: Run,
    outcome: str | SchedulerError,
    kind: RunEventKind = RunEventKind.submitted,
    detail: str | None = None,
) -> bool:
    """Stage what submitting the run came to: its job id, or the scheduler's refusal; False if the run was
    cancelled meanwhile (its job, if it got one, is then the caller's to withdraw once this is committed)."""
    if isinstance(outcome, SchedulerError):
        log.warning("run %s: submission failed: %s", run.id, outcome)
        _mark_submit_failed(session, run, str(outcome), tried=True)
        return True
    submitted = {
        "attempt": run.attempt + 1,
        "job_id": outcome,
        "state": RunState.submitted,
        "submitted_at": utcnow(),
        "waiting": False,
        "message": None,
    }
    if not _still_unsubmitted(session, run, RunState.created, submitted):
        return False
    events.record(session, run, kind, detail or f"attempt {run.attempt}")
    return True


def _record_outcomes(
    session: Session,
    outcomes: list[tuple[Run, str | SchedulerError]],
    scheduler: Scheduler,
    kind: RunEventKind = RunEventKind.submitted,
    detail: str | None = None,
) -> None:
    """Record and commit what the submissions came to; then cancel the jobs of runs cancelled meanwhile.

    The jobs are cancelled after the commit: the write lock is not held while Slurm answers."""
    lost = [(run, outcome) for run, outcome in outcomes if not _record_outcome(session, run, outcome, kind, detail)]
    session.commit()
    for run, outcome in lost:
        session.refresh(run)
        if isinstance(outcome, str):
            _withdraw(session, run, outcome, scheduler)


def _withdraw(session: Session, run: Run, job_id: str, scheduler: Scheduler) -> None:
    """Cancel job `job_id`, which the run got after it was cancelled: a cancelled run keeps no live job. Should
    the scheduler refuse, the run follows the job again, so that it says the truth and can be cancelled again."""
    try:
        scheduler.cancel(job_id, run.owner)
    except SchedulerError as exc:
        log.warning(
            "run %s: cancelled while submitting, but its job %s could not be cancelled: %s", run.id, job_id, exc
        )
        message = (
            f"cancelled while it was being submitted, but its job {job_id} could not be cancelled ({exc}): "
            "cancel it again"
        )
        followed = {
            "job_id": job_id,
            "state": RunState.submitted,
            "attempt": run.attempt + 1,
            "submitted_at": utcnow(),
            "ended_at": None,
            "message": message,
        }
        if _still_unsubmitted(session, run, RunState.cancelled, followed):
            events.record(session, run, RunEventKind.submitted, message)
    else:
        log.info("run %s: cancelled while submitting; cancelled its job %s", run.id, job_id)
        events.record(
            session, run, RunEventKind.cancel_requested, f"job {job_id} came after the run was cancelled: cancelled it"
        )
    session.commit()


def _submit(scheduler: Scheduler, run: Run) -> str | SchedulerError:
    try:
        return scheduler.submit(*_script_of(run, scheduler), run.owner)
    except SchedulerError as exc:
        return exc


def submit_run(session: Session, run: Run, scheduler: Scheduler) -> None:
    """Submit one prepared run and record the outcome; raises SchedulerUnavailable (after recording it) when the
    scheduler cannot be reached."""
    outcome = _submit(scheduler, run)
    _record_outcomes(session, [(run, outcome)], scheduler)
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


def submit_runs(
    session: Session,
    runs: list[Run],
    scheduler: Scheduler,
    in_arrays: Sequence[arrays.RunArray] = (),
    settings: Settings | None = None,
) -> SchedulerUnavailable | None:
    """Submit runs in grid order, up to the scheduler's `submit_concurrency` at a time, recording each outcome;
    the runs of `in_arrays` (among `runs`) first, an sbatch per array, into `settings.runs_dir`.

    Once the scheduler is unreachable, no more are started: the rest are kept as submit_failed untried (each would
    wait as long), and those already under way are recorded as they turn out.
    """
    unavailable, runs = _submit_arrays(session, runs, scheduler, in_arrays, settings)
    queue = deque(runs) if unavailable is None else deque()
    if unavailable is not None:
        for untried in runs:
            _mark_submit_failed(session, untried, f"not submitted: {unavailable}")
    under_way: deque[tuple[Run, Future[str | SchedulerError]]] = deque()
    outcomes: list[tuple[Run, str | SchedulerError]] = []
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
        outcomes.append((run, outcome))
        if len(outcomes) == COMMIT_EVERY:
            _record_outcomes(session, outcomes, scheduler)
            outcomes = []
    _record_outcomes(session, outcomes, scheduler)
    for untried in queue:
        _mark_submit_failed(session, untried, f"not submitted: {unavailable}")
    session.commit()
    return unavailable


def _submit_arrays(
    session: Session,
    runs: list[Run],
    scheduler: Scheduler,
    in_arrays: Sequence[arrays.RunArray],
    settings: Settings | None,
) -> tuple[SchedulerUnavailable | None, list[Run]]:
    """Submit each array with one sbatch and record its runs' outcomes; the scheduler's unavailability, if it
    was, and the runs left to submit one by one."""
    if not in_arrays or settings is None:
        return None, runs
    in_one = {run.id for array in in_arrays for run in array.runs}
    for array in in_arrays:
        outcomes = arrays.submit(array, settings.runs_dir, scheduler)
        _record_outcomes(session, outcomes, scheduler)
        refused = outcomes[0][1]
        if isinstance(refused, SchedulerUnavailable):
            # The arrays not yet tried are kept as submit_failed, as the runs of their own are.
            tried = {run.id for run, _ in outcomes}
            left = [run for run in runs if run.id not in tried and run.id not in in_one]
            for untried in [run for later in in_arrays for run in later.runs if run.id not in tried]:
                _mark_submit_failed(session, untried, f"not submitted: {refused}")
            session.commit()
            return refused, left
    return None, [run for run in runs if run.id not in in_one]


def resubmit_run(session: Session, run: Run, experiment: Experiment, scheduler: Scheduler) -> None:
    """Submit a run that ended without completing again, with the same spec and script, in the same directory:
    the worker resumes from the run's last checkpoint if it has one. Within a concurrency limit, it waits for a
    slot like the experiment's other runs (none is free, or others wait before it). Raises Conflict, or
    SchedulerUnavailable (after recording)."""
    if why := why_not_resubmit(run) or dependencies.why_not_resubmit(session, run):
        raise Conflict(why)
    events.record(session, run, RunEventKind.resubmitted, f"after {run.state}")
    run.state = RunState.created
    run.scheduler = scheduler.name
    run.job_id = run.scheduler_state = run.scheduler_reason = run.exit_code = run.message = None
    run.failure_kind = run.failure_detail = None  # classified again if it fails again
    run.started_at = run.ended_at = run.submitted_at = None
    run.ingest_done = False  # the output file grows again from where it was read
    run.waiting = False
    _hold_unless_free(session, run, experiment)
    session.add(run)
    session.commit()
    if not run.waiting:
        submit_run(session, run, scheduler)


def rerun(
    session: Session,
    originals: list[tuple[Run, RunSpec, str | None]],
    experiment: Experiment,
    request: ExperimentCreate,
    plan: Plan,
    settings: Settings,
    scheduler: Scheduler,
) -> list[Run]:
    """New runs of the experiment, one per (original, spec, image): each repeats its original with `spec`, on
    `image` (the one the original ran in, named by its digest) or, where None, on the profile's image as the
    experiment's runs. All are written, or none; then those a slot lets through are submitted.

    Raises SchedulerUnavailable (after recording)."""
    last = session.exec(select(func.max(Run.position)).where(Run.experiment_id == experiment.id)).one() or 0
    now = utcnow()
    runs: list[Run] = []
    with committed_with_directories(session, runs):
        for offset, (original, spec, image) in enumerate(originals, start=1):
            run = _prepare_run(experiment, last + offset, spec, plan, settings, scheduler, request, image)
            run.owner, run.rerun_of, run.created_at = original.owner, original.id, now
            runs.append(run)
            _hold_unless_free(session, run, experiment)
            session.add(run)
    unavailable = submit_runs(session, [run for run in runs if not run.waiting], scheduler)
    if unavailable is not None:
        raise unavailable
    return runs


def _cancel(session: Session, run: Run, scheduler: Scheduler, why: str | None = None) -> None:
    """Stage the cancellation of a run that has not ended, saying `why` where scalelab itself stops it; the caller
    commits.

    A run with a job keeps its state until the monitor sees the job cancelled, so the state always says what the
    scheduler said. A run that never reached the scheduler is cancelled at once. Raises SchedulerError if the
    scheduler cannot cancel the job.
    """
    events.record(session, run, RunEventKind.cancel_requested, why)
    if run.job_id is None:
        cancelled = {
            "state": RunState.cancelled,
            "ended_at": utcnow(),
            "message": why or "cancelled before it was submitted",
            "waiting": False,
        }
        if _still_unsubmitted(session, run, RunState.created, cancelled):
            return
        # Its submission came first: the run has its job now (cancelled below), or it could not be submitted.
        session.refresh(run)
        if run.job_id is None:
            return
    if run.scheduler != scheduler.name:
        raise SchedulerError(
            f"run {run.id} was submitted to the {run.scheduler} scheduler, but this server uses {scheduler.name}"
        )
    log.info("run %s: cancelling job %s", run.id, run.job_id)
    if why is not None:
        run.message = why  # kept when it ends cancelled (runstate.apply_status)
        session.add(run)
    scheduler.cancel(run.job_id, run.owner)


def stop_unstarted(session: Session, run: Run, scheduler: Scheduler, why: str) -> None:
    """Stop a run that has not started because another failed in a way it would too (on_failure), saying why: one
    held back by scalelab is never released, one in Slurm's queue is cancelled there. Raises SchedulerError."""
    _cancel(session, run, scheduler, why)


# ---- what the monitor does each cycle ----------------------------------------------------------------------------


def _occupied(session: Session, experiment_id: str, besides: str | None = None) -> int:
    """The experiment's slots taken: runs in the scheduler, or on their way to it (all but `besides`)."""
    return session.exec(
        select(func.count()).where(
            Run.experiment_id == experiment_id,
            col(Run.state).in_([*LIVE_STATES, RunState.created]),
            Run.waiting == False,  # noqa: E712  (SQL, not Python, comparison)
            Run.id != besides,
        )
    ).one()


def _hold_unless_free(session: Session, run: Run, experiment: Experiment) -> None:
    """Within the experiment's limit, a run going back to the scheduler waits unless a slot is free and no other
    run waits for one before it."""
    limit = experiment.max_concurrent
    if limit is None:
        return
    queued = session.exec(
        select(Run.id).where(Run.experiment_id == experiment.id, Run.waiting == True, Run.id != run.id)  # noqa: E712
    ).first()
    if queued is not None or _occupied(session, experiment.id, besides=run.id) >= limit:
        # A limit the request did not set is the one exclusive runs on shared nodes take turns by (Plan.max_concurrent).
        asked = (experiment.request.get("resources") or {}).get("max_concurrent")
        hold_for_slot(run, limit, taking_turns=asked is None)


def release_waiting(engine: Engine, scheduler: Scheduler) -> None:
    """Submit runs held back by their experiment's concurrency limit, as slots free up, in grid order."""
    with Session(engine) as session:
        experiment_ids = session.exec(select(Run.experiment_id).where(Run.waiting == True).distinct()).all()  # noqa: E712
        for experiment_id in experiment_ids:
            experiment = session.get(Experiment, experiment_id)
            if experiment is None or experiment.max_concurrent is None:
                continue
            free = experiment.max_concurrent - _occupied(session, experiment_id)
            if free <= 0 or _awaiting_verdict(session, experiment):
                continue
            waiting = session.exec(
                select(Run)
                .where(Run.experiment_id == experiment_id, Run.waiting == True)  # noqa: E712
                .order_by(col(Run.position))
                .limit(free)
            ).all()
            for run in waiting:
                submit_run(session, run, scheduler)


def _awaiting_verdict(session: Session, experiment: Experiment) -> bool:
    """Whether the experiment's waiting runs stay back until a failed run's kind is known: a failure that repeats at
    any size stops them (server/services/failed_runs.py, unless on_failure is continue), and its kind is known only
    once its output has been read to the end."""
    if on_failure_of(experiment.request) == "continue":
        return False
    unclassified = session.exec(
        select(Run.id).where(
            Run.experiment_id == experiment.id,
            col(Run.state).in_(FAILED_STATES),
            col(Run.failure_kind).is_(None),
        )
    ).first()
    return unclassified is not None


def reconcile(engine: Engine, scheduler: Scheduler, since: datetime) -> None:
    """Runs a server that stopped before `since` left between writing and submitting: find their jobs (by their
    names, or as tasks of the arrays they went in), or submit them now."""
    with Session(engine) as session:
        orphans = session.exec(
            select(Run).where(
                Run.state == RunState.created,
                Run.waiting == False,  # noqa: E712  (SQL, not Python, comparison)
                col(Run.job_id).is_(None),
                col(Run.created_at) < since,
            )
        ).all()
        if not orphans:
            return
        fresh, cancelled = _never_recorded(session, orphans, since) if arrays.submits_arrays(scheduler) else ([], [])
        found = scheduler.jobs_of([run.id for run in orphans], arrays.tasks_to_find(fresh, cancelled))
        # A resubmitted run's name finds its earlier attempts' jobs too (sacct keeps a week): this attempt's is none.
        for run_id, job_id in events.jobs_before(session, [run.id for run in orphans if run.attempt]):
            if found.get(run_id) == job_id:
                del found[run_id]
        for run in orphans:
            if run.id in found:
                run.scheduler = scheduler.name
                detail = f"found its job after a server restart{_as_task(found[run.id])}"
                _record_outcomes(session, [(run, found[run.id])], scheduler, RunEventKind.reconciled, detail)
            else:
                events.record(session, run, RunEventKind.reconciled, "never submitted: submitting it now")
                submit_run(session, run, scheduler)
        # A task whose run was cancelled while its array was submitted is cancelled, as submitting does.
        _record_outcomes(session, [(run, found[run.id]) for run in cancelled if run.id in found], scheduler)


def _never_recorded(session: Session, orphans: Sequence[Run], since: datetime) -> tuple[list[Run], list[Run]]:
    """The runs an array a stopped server submitted but never recorded may hold: orphans never submitted before
    (a resubmitted run's array, if it was in one, was recorded, and its task is a past attempt's), and the runs of
    their experiments cancelled before any job was recorded for them (while their array was being submitted)."""
    fresh = [run for run in orphans if run.attempt == 0]
    if not fresh:
        return [], []
    cancelled = session.exec(
        select(Run).where(
            col(Run.experiment_id).in_({run.experiment_id for run in fresh}),
            Run.state == RunState.cancelled,
            Run.attempt == 0,
            col(Run.job_id).is_(None),
            col(Run.created_at) < since,
        )
    ).all()
    return fresh, list(cancelled)


def _as_task(job_id: str) -> str:
    if not is_array_task(job_id):
        return ""
    array_job, _, index = job_id.rpartition("_")
    return f": task {index} of array job {array_job}"


# ---- commands: what the API and the pages ask for ---------------------------------------------------------------


def owner_of(session: Session, owner: str | None, acting: User) -> User:
    """Whose quotas runs count against: their owner's (an admin acting on them does not spend their own)."""
    found = session.get(User, owner) if owner else None
    return found or acting


def kept(experiment_id: str, exc: SchedulerUnavailable, runs_left: str) -> SchedulerDown:
    return SchedulerDown(
        f"{exc}. Experiment {experiment_id}: {runs_left} kept as submit_failed; resubmit them "
        f"(POST /api/experiments/{experiment_id}/resubmit) once Slurm answers again.",
        experiment_id=experiment_id,
    )


def submit_experiment(
    session: Session,
    request: ExperimentCreate,
    settings: Settings,
    scheduler: Scheduler,
    catalog: ProfileCatalog,
    user: User,
) -> tuple[Experiment, list[Run], list[SkippedRun]]:
    """Plan the request, check the user's quotas, create the runs and submit them; nothing is created if a check
    fails. If the scheduler cannot be reached, the runs are kept as submit_failed and SchedulerDown names them."""
    plan = plan_request(
        session, request, catalog, scheduler, user, programs_for_all=settings.programs_for_all_as_service_account
    )
    check_quotas(session, user, settings, plan.specs, new=True)
    try:
        experiment, runs, unreachable = create_experiment(session, request, plan, settings, scheduler, user.name)
    except OSError as exc:
        raise rundirs.unwritable(settings.runs_dir, exc, "nothing was submitted") from None
    if unreachable is not None:
        failed = sum(run.state is RunState.submit_failed for run in runs)
        raise kept(experiment.id, unreachable, f"{failed} of its {len(runs)} runs are")
    return experiment, runs, plan.skipped_runs()


def clone_experiment(
    session: Session,
    experiment_id: str,
    changes: ExperimentChanges,
    settings: Settings,
    scheduler: Scheduler,
    catalog: ProfileCatalog,
    user: User,
) -> tuple[Experiment, list[Run], list[SkippedRun]]:
    """A new experiment of the user's from an earlier one's request with changes, validated like a new one (its
    errors name the fields of the combined request)."""
    original = get_experiment(session, experiment_id)
    # From the request as this user may see it: another's env values stay hidden, and planning refuses a value
    # left hidden, naming it, so that the clone's owner gives their own.
    shown = secrets.request_for(user, original.owner, original.request)
    try:
        request = ExperimentCreate.model_validate(changes.apply(shown))
    except ValidationError as exc:
        raise Invalid.of(exc, "body") from None
    return submit_experiment(session, request, settings, scheduler, catalog, user)


def cancel_experiment(session: Session, experiment_id: str, scheduler: Scheduler, user: User) -> list[Run]:
    """Ask the scheduler to stop every run of the experiment that has not ended; the runs asked to stop."""
    experiment = get_experiment(session, experiment_id)
    require_owner(user, experiment.owner, f"experiment {experiment_id}")
    runs = runs_of_experiment(session, experiment_id, set(RunState) - FINAL_STATES)
    if not runs:
        raise Conflict(f"every run of experiment {experiment_id} has already ended; nothing to cancel")
    failures = []
    for run in runs:
        try:
            _cancel(session, run, scheduler)
        except SchedulerUnavailable as exc:
            session.commit()
            raise SchedulerDown(f"cannot cancel now: {exc}") from None
        except SchedulerError as exc:
            failures.append(f"run {run.id}: {exc}")
    session.commit()
    if failures:
        raise SchedulerRefused(
            f"could not cancel {len(failures)} of {len(runs)} runs (the others were): " + "; ".join(failures)
        )
    return runs


def cancel(session: Session, run_id: str, scheduler: Scheduler, user: User) -> Run:
    run = get_run(session, run_id)
    require_owner(user, run.owner, f"run {run_id}")
    if why := why_not_cancel(run):
        raise Conflict(why)
    try:
        _cancel(session, run, scheduler)
    except SchedulerUnavailable as exc:
        raise SchedulerDown(f"cannot cancel run {run_id} now: {exc}") from None
    except SchedulerError as exc:
        raise SchedulerRefused(f"could not cancel run {run_id}: {exc}") from None
    session.commit()
    return run


def resubmit_experiment(
    session: Session, experiment_id: str, settings: Settings, scheduler: Scheduler, user: User
) -> list[Run]:
    """Submit again every run of the experiment that ended without completing; the runs submitted again."""
    experiment = get_experiment(session, experiment_id)
    require_owner(user, experiment.owner, f"experiment {experiment_id}")
    runs = [
        run for run in runs_of_experiment(session, experiment_id, RESUBMITTABLE_STATES) if not why_not_resubmit(run)
    ]
    if not runs:
        raise Conflict(f"no run of experiment {experiment_id} ended without completing; nothing to do")
    owner = owner_of(session, experiment.owner, user)
    _require_programs(runs, owner, settings, scheduler)
    specs = [RunSpec.model_validate(run.spec) for run in runs]
    check_quotas(session, owner, settings, specs, new=False)
    for index, run in enumerate(runs):
        try:
            resubmit_run(session, run, experiment, scheduler)
        except SchedulerUnavailable as exc:
            raise kept(experiment_id, exc, f"{len(runs) - index} runs are still") from None
    return runs


def _require_programs(runs: list[Run], owner: User, settings: Settings, scheduler: Scheduler) -> None:
    """NotAllowed if a program run among `runs` would run again for an owner who may no longer run programs (they
    ran before the rule, or before the operator took SCALELAB_PROGRAMS_FOR_ALL_AS_SERVICE_ACCOUNT back): the
    program's files are the owner's to change, whoever asks. Running again plans the run, which checks the same."""
    if not any(is_program(run) for run in runs):
        return
    why = why_no_programs(owner, scheduler.runs_as_user, settings.programs_for_all_as_service_account)
    if why is not None:
        raise NotAllowed(why, reason=PROGRAMS_ADMIN_ONLY)


def _experiment_of(session: Session, run: Run) -> Experiment:
    experiment = session.get(Experiment, run.experiment_id)
    if experiment is None:
        raise Conflict(f"run {run.id} belongs to no experiment any more: it cannot run again")
    return experiment


def resubmit(session: Session, run_id: str, settings: Settings, scheduler: Scheduler, user: User) -> Run:
    run = get_run(session, run_id)
    require_owner(user, run.owner, f"run {run_id}")
    if why := why_not_resubmit(run):
        raise Conflict(why)
    experiment = _experiment_of(session, run)
    owner = owner_of(session, run.owner, user)
    _require_programs([run], owner, settings, scheduler)
    check_quotas(session, owner, settings, [RunSpec.model_validate(run.spec)], new=False)
    try:
        resubmit_run(session, run, experiment, scheduler)
    except SchedulerUnavailable as exc:
        raise SchedulerDown(
            f"{exc}. Run {run_id} is kept as submit_failed: resubmit it once Slurm answers again."
        ) from None
    return run


def run_again(
    session: Session, run_id: str, settings: Settings, scheduler: Scheduler, catalog: ProfileCatalog, user: User
) -> Run:
    """A new run of the run's experiment with its spec, on the image digest it ran on."""
    run = get_run(session, run_id)
    require_owner(user, run.owner, f"run {run_id}")
    profile = catalog.profiles.get(run.profile or "")
    if why := why_not_rerun(run, profile.container.runtime if profile else None):
        raise RunNotRepeatable(why)
    image = pinned_image(run)
    experiment = _experiment_of(session, run)
    owner = owner_of(session, run.owner, user)
    request = ExperimentCreate.model_validate(experiment.request)  # an inference run's prompts come with it
    plan = plan_request(
        session, request, catalog, scheduler, owner, programs_for_all=settings.programs_for_all_as_service_account
    )
    spec = RunSpec.model_validate(run.spec)
    check_quotas(session, owner, settings, [spec], new=True)
    try:
        return rerun(session, [(run, spec, image)], experiment, request, plan, settings, scheduler)[0]
    except SchedulerUnavailable as exc:
        raise SchedulerDown(f"{exc}. The new run is kept as submit_failed: resubmit it later.") from None
    except OSError as exc:
        raise rundirs.unwritable(settings.runs_dir, exc, "nothing was submitted") from None


def _failed_to_rerun(runs: list[Run], experiment_id: str, asked: FailedRerun) -> list[Run]:
    """The runs `asked` chooses among the experiment's `runs`; Invalid for a named run that is not one of them,
    Conflict (saying why) when none is chosen. A failed run rerun already is left out unless named: asking again
    reruns what still failed, the reruns among them."""
    named = set(asked.run_ids)
    if unknown := sorted(named - {run.id for run in runs}):
        raise Invalid([(("body", "run_ids"), f"no run {', '.join(unknown)} in experiment {experiment_id}")])
    if named:
        failed = [run for run in runs if run.id in named and run.state in FAILED_STATES and run.origin != "imported"]
    else:
        failed = failed_not_rerun(runs)
    chosen = [run for run in failed if not asked.kinds or run.failure_kind in asked.kinds]
    if chosen:
        return chosen
    what = "failed run" + (f" of kind {' or '.join(asked.kinds)}" if asked.kinds else "")
    among = f"among runs {', '.join(sorted(named))}" if named else f"in experiment {experiment_id}"
    why = f"no {what} {among}"
    if failed:
        kinds = sorted({str(run.failure_kind or "not yet classified") for run in failed})
        why += f" (its failed runs are: {', '.join(kinds)})"
    repeated = {run.rerun_of for run in runs if run.rerun_of}
    left_out = 0 if named else sum(run.id in repeated and run.state in FAILED_STATES for run in runs)
    if left_out:
        why += f"; {left_out} failed runs were rerun already: name them in run_ids to rerun them again"
    raise Conflict(why + "; nothing was submitted")


def _rerun_spec(run: Run, changes: dict[str, Any], plan: Plan) -> RunSpec:
    """The run's spec with the changes, validated as a spec and checked as the grid's combinations were (the
    partition, the trained model's context, the heads a tensor-parallel degree splits): Invalid names the field of
    `set` (and the run) that makes it one that cannot run."""
    where = ("body", "set")
    try:
        spec = RunSpec.model_validate(changed_spec(run.spec, changes))
    except ValidationError as exc:
        invalid = Invalid.of(exc, *where)
        for error in invalid.errors:
            error["msg"] = f"run {run.id}: {error['msg']}"
        raise invalid from None
    if problems := plan.why_not(spec):
        raise Invalid([(where, f"run {run.id}: {problem}") for problem in problems])
    return spec


def _image_again(run: Run, catalog: ProfileCatalog) -> str | None:
    """The image a failed run's rerun names: the digest it ran in where it recorded one its profile can pin (the
    same software, so that the two compare), else None: the profile's image, as the experiment's other runs."""
    profile = catalog.profiles.get(run.profile or "")
    if why_not_rerun(run, profile.container.runtime if profile else None) is not None:
        return None
    try:
        return pinned_image(run)
    except RunNotRepeatable:
        return None


@dataclass(frozen=True)
class PlannedReruns:
    """What rerunning an experiment's failed runs would submit: each original with its changed spec and image."""

    experiment: Experiment
    request: ExperimentCreate
    plan: Plan
    owner: User
    again: list[tuple[Run, RunSpec, str | None]]


def plan_reruns(
    session: Session,
    experiment_id: str,
    asked: FailedRerun,
    settings: Settings,
    scheduler: Scheduler,
    catalog: ProfileCatalog,
    user: User,
) -> PlannedReruns:
    """The failed runs `asked` chooses, each with its spec changed by `asked.set`, checked as the experiment's runs
    are; writes nothing. Invalid names the field of `set` that makes one unable to run."""
    experiment = get_experiment(session, experiment_id)
    require_owner(user, experiment.owner, f"experiment {experiment_id}")
    if reset := sorted(SERVER_FIELDS & set(asked.set)):
        raise Invalid([(("body", "set", field), "set by the server from the experiment as a whole") for field in reset])
    originals = _failed_to_rerun(runs_of_experiment(session, experiment_id), experiment_id, asked)
    owner = owner_of(session, experiment.owner, user)
    request = ExperimentCreate.model_validate(experiment.request)
    plan = plan_request(
        session, request, catalog, scheduler, owner, programs_for_all=settings.programs_for_all_as_service_account
    )
    again = [(run, _rerun_spec(run, asked.set, plan), _image_again(run, catalog)) for run in originals]
    return PlannedReruns(experiment, request, plan, owner, again)


def preview_reruns(planned: PlannedReruns) -> RerunPreview:
    """What rerun_failed would submit, and how each rerun's spec differs from its original's."""
    previewed = []
    for run, spec, _ in planned.again:
        fields = spec.model_dump(mode="json")
        changed = {key: value for key, value in fields.items() if run.spec.get(key) != value}
        previewed.append(
            RerunPreviewed(
                rerun_of=run.id, state=run.state, failure_kind=run.failure_kind, spec=fields, changed=changed
            )
        )
    return RerunPreview(data=previewed, count=len(previewed))


def rerun_failed(
    session: Session,
    experiment_id: str,
    asked: FailedRerun,
    settings: Settings,
    scheduler: Scheduler,
    catalog: ProfileCatalog,
    user: User,
) -> list[Run]:
    """New runs of the experiment repeating its failed runs (those `asked` chooses), each with `asked.set` changed
    and `rerun_of` its original; planned, checked and submitted as the experiment's runs. Nothing is written unless
    every rerun is valid and within the owner's quotas."""
    planned = plan_reruns(session, experiment_id, asked, settings, scheduler, catalog, user)
    check_quotas(session, planned.owner, settings, [spec for _, spec, _ in planned.again], new=True)
    try:
        return rerun(session, planned.again, planned.experiment, planned.request, planned.plan, settings, scheduler)
    except SchedulerUnavailable as exc:
        raise kept(experiment_id, exc, "the new runs are") from None
    except OSError as exc:
        raise rundirs.unwritable(settings.runs_dir, exc, "nothing was submitted") from None
