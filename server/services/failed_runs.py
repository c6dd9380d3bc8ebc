"""What the monitor does with runs that failed: each one's failure kind stored once its output has been read to the
end (failure_kinds.py decides it), and its experiment's on_failure applied: after a failure that repeats at any size
(REPEATING_FAILURES), the runs of its series that have not started are not started, and say why."""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from contract.spec import RunSpec
from contract.states import REPEATING_FAILURES, FailureKind, RunState
from server.models import Experiment, OnFailure, Run, on_failure_of
from server.runstate import FAILED_STATES
from server.scheduler import Scheduler, SchedulerError
from server.services import notifications, programs, rundirs, submission
from server.services.comparison.series import series_key
from server.services.failure_kinds import Ending, classify
from server.services.ingestion.reading import REFUSED
from server.services.ingestion.storing import WORKER_REPORTED

log = logging.getLogger(__name__)

# Runs classified per cycle at most: after an upgrade every earlier failed run is classified once, a few per cycle.
CLASSIFIED_PER_CYCLE = 200
# The states of a run that has not started: held back by scalelab (waiting), or in Slurm's queue.
NOT_STARTED = (RunState.created, RunState.submitted, RunState.pending)


def ending_of(run: Run) -> Ending:
    """What the server knows of the run's end: Slurm's words, the worker's own error, the last lines of its output
    (read as programs.py reads them: bounded, no link followed; none where its reading was refused)."""
    lines: list[str] = []
    if run.message and run.message.startswith(WORKER_REPORTED):
        lines.append(run.message.removeprefix(WORKER_REPORTED))
    if run.output_file != REFUSED and run.run_dir:
        lines += programs.said_lines(Path(run.run_dir), rundirs.file_owner(run))
    return Ending(run.state, run.exit_code, run.scheduler_reason, lines)


def classify_ended(engine: Engine, scheduler: Scheduler) -> None:
    """Store the failure kind of each failed run read to its end that has none yet (a kind set already, `hung` by
    the watchdog, stays); then apply each one's experiment's on_failure."""
    with Session(engine) as session:
        runs = session.exec(
            select(Run)
            .where(
                col(Run.state).in_(FAILED_STATES),
                Run.ingest_done == True,  # noqa: E712  (SQL, not Python, comparison)
                col(Run.failure_kind).is_(None),
            )
            .limit(CLASSIFIED_PER_CYCLE)
        ).all()
        for run in runs:
            verdict = classify(ending_of(run))
            if verdict is None:
                continue
            run.failure_kind, run.failure_detail = verdict.kind, verdict.detail
            session.add(run)
            notifications.run_failed(session, run)
            log.info("run %s failed: %s (%s)", run.id, verdict.kind, verdict.evidence)
        session.commit()
        for run in runs:
            if run.failure_kind in REPEATING_FAILURES:
                stop_after(session, run, scheduler)


def stop_after(session: Session, failed: Run, scheduler: Scheduler) -> list[Run]:
    """Apply the failed run's experiment's on_failure: the runs it stops, each cancelled saying why."""
    experiment = session.get(Experiment, failed.experiment_id)
    if experiment is None or failed.failure_kind is None:
        return []
    policy = on_failure_of(experiment.request)
    stopped = [run for run in _not_started(session, failed) if _stops(policy, failed, run)]
    why = _why(policy, failed, failed.failure_kind)
    for run in stopped:
        try:
            submission.stop_unstarted(session, run, scheduler, why)
        except SchedulerError as exc:
            log.warning("run %s: could not be stopped after run %s failed: %s", run.id, failed.id, exc)
    session.commit()
    return stopped


def _not_started(session: Session, failed: Run) -> list[Run]:
    return list(
        session.exec(
            select(Run).where(
                Run.experiment_id == failed.experiment_id,
                Run.id != failed.id,
                col(Run.state).in_(NOT_STARTED),
                col(Run.started_at).is_(None),
            )
        ).all()
    )


def _stops(policy: OnFailure, failed: Run, run: Run) -> bool:
    if policy == "stop_all":
        return True
    if policy == "continue":
        return False
    return same_series(failed, run)


def same_series(one: Run, other: Run) -> bool:
    """Whether two runs are of one scaling series: the same spec but for the scaled fields (series.series_key)."""
    try:
        first, second = RunSpec.model_validate(one.spec), RunSpec.model_validate(other.spec)
    except ValueError:
        return False  # a spec this version cannot read: left to run
    return series_key(first, "strong") == series_key(second, "strong")


def _why(policy: OnFailure, failed: Run, kind: FailureKind) -> str:
    which = "its series" if policy == "stop_series" else "its experiment"
    return (
        f"not run: run {failed.id} of {which} failed with {kind}, which fails the same way at any size "
        f"(on_failure {policy}); fix the cause, then resubmit the experiment's failed runs"
    )
