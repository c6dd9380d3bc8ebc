"""Failed runs after their output is read to the end: each one's kind stored from its real output file (a kind set
before stays), the experiment's summary by kind and grid coordinate, and on_failure stopping the runs not started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from contract.rundir import OUTPUT_FILE
from contract.states import FailureKind, RunState
from server.models import Experiment, Run, RunEvent, RunEventKind
from server.runstate import apply_status
from server.scheduler import JobStatus
from server.scheduler.local import LocalScheduler
from server.services import failed_runs, submission
from server.services.failure_kinds import ADVICE
from server.services.failure_summary import failure_summary
from tests.factories import experiment_row, run_row, spec

IMPORT_ERROR = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'no_such_module'\n"


def _experiment(session: Session, on_failure: str | None) -> Experiment:
    request = {"name": "grid", "grid": {"strategy": ["ddp", "fsdp"], "gpus": [1, 2, 4]}}
    if on_failure is not None:
        request["on_failure"] = on_failure
    return experiment_row(session, request=request)


def _failed(session: Session, experiment: Experiment, tmp_path: Path, output: str, **fields: Any) -> Run:
    run_dir = tmp_path / "failed"
    run_dir.mkdir()
    (run_dir / OUTPUT_FILE).write_text(output)
    return run_row(
        session,
        experiment,
        run_dir,
        run_spec=spec(strategy="ddp", gpus=1),
        state=RunState.failed,
        exit_code="1:0",
        ingest_done=True,
        scheduler="local",
        **fields,
    )


def _waiting(session: Session, experiment: Experiment, tmp_path: Path, position: int, **fields: Any) -> Run:
    return run_row(
        session,
        experiment,
        tmp_path / f"w{position}",
        run_spec=spec(**fields),
        state=RunState.created,
        position=position,
        waiting=True,
        scheduler="local",
    )


@pytest.fixture
def scheduler(tmp_path: Path) -> LocalScheduler:
    return LocalScheduler(tmp_path / ".local-jobs")


def test_a_failed_run_read_to_its_end_gets_its_kind_from_its_output(session, engine, tmp_path, scheduler):
    experiment = _experiment(session, "continue")
    run = _failed(session, experiment, tmp_path, "[METRIC] not a record\n" + IMPORT_ERROR)
    cancelled = run_row(session, experiment, tmp_path / "c", state=RunState.cancelled, ingest_done=True, position=1)
    failed_runs.classify_ended(engine, scheduler)
    session.refresh(run)
    session.refresh(cancelled)
    assert run.failure_kind == FailureKind.import_error
    assert run.failure_detail is not None and "no_such_module" in run.failure_detail
    assert run.failure_detail.endswith(ADVICE[FailureKind.import_error])
    assert cancelled.failure_kind is None  # the user stopped it: not a failure


def test_a_kind_set_already_is_kept_and_one_not_read_to_its_end_waits(session, engine, tmp_path, scheduler):
    experiment = _experiment(session, "continue")
    hung = _failed(session, experiment, tmp_path, IMPORT_ERROR, failure_kind=FailureKind.hung, failure_detail="rank 1")
    unread = run_row(session, experiment, tmp_path / "u", state=RunState.failed, ingest_done=False, position=1)
    failed_runs.classify_ended(engine, scheduler)
    session.refresh(hung)
    session.refresh(unread)
    assert (hung.failure_kind, hung.failure_detail) == (FailureKind.hung, "rank 1")
    assert unread.failure_kind is None


@pytest.mark.parametrize(
    ("on_failure", "stopped_positions"),
    [(None, {1, 2}), ("stop_series", {1, 2}), ("stop_all", {1, 2, 3}), ("continue", set())],
)
def test_on_failure_stops_the_runs_not_started(session, engine, tmp_path, scheduler, on_failure, stopped_positions):
    experiment = _experiment(session, on_failure)
    failed = _failed(session, experiment, tmp_path, IMPORT_ERROR)
    larger = [
        _waiting(session, experiment, tmp_path, position, strategy="ddp", gpus=gpus)
        for position, gpus in ((1, 2), (2, 4))
    ]
    other = _waiting(session, experiment, tmp_path, 3, strategy="fsdp", gpus=2)
    # Until the failed run's kind is known, nothing waiting is released (unless on_failure is continue).
    held = submission._awaiting_verdict(session, experiment)
    assert held is (on_failure != "continue")
    failed_runs.classify_ended(engine, scheduler)
    with Session(engine) as fresh:
        runs = {run.position: run for run in fresh.exec(select(Run).where(Run.experiment_id == experiment.id))}
        stopped = {position for position, run in runs.items() if run.state is RunState.cancelled}
        assert stopped == stopped_positions
        for position in stopped:
            assert not runs[position].waiting
            assert f"run {failed.id}" in (runs[position].message or "")
            assert "import_error" in (runs[position].message or "")
            said = fresh.exec(select(RunEvent).where(RunEvent.run_id == runs[position].id)).all()
            assert [event.kind for event in said] == [RunEventKind.cancel_requested]
        assert all(runs[position].waiting for position in {1, 2, 3} - stopped)
        assert not submission._awaiting_verdict(fresh, fresh.get(Experiment, experiment.id))  # type: ignore[arg-type]
    del larger, other


def test_a_failure_that_may_not_repeat_stops_nothing(session, engine, tmp_path, scheduler):
    experiment = _experiment(session, "stop_all")
    _failed(session, experiment, tmp_path, "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=3.0\n")
    waiting = _waiting(session, experiment, tmp_path, 1, strategy="ddp", gpus=2)
    failed_runs.classify_ended(engine, scheduler)
    session.refresh(waiting)
    assert waiting.state is RunState.created and waiting.waiting


def test_the_summary_counts_failures_by_kind_and_grid_coordinate(session, engine: Engine, tmp_path):
    experiment = _experiment(session, "continue")
    kinds = [
        ("fsdp", 4, RunState.out_of_memory, FailureKind.out_of_memory),
        ("fsdp", 4, RunState.failed, FailureKind.out_of_memory),
        ("ddp", 2, RunState.timeout, FailureKind.time_limit),
        ("ddp", 1, RunState.completed, None),
        ("ddp", 4, RunState.failed, None),
        ("ddp", 4, RunState.cancelled, None),
    ]
    for position, (strategy, gpus, state, kind) in enumerate(kinds):
        run_row(
            session,
            experiment,
            tmp_path / str(position),
            run_spec=spec(strategy=strategy, gpus=gpus),
            state=state,
            position=position,
            failure_kind=kind,
        )
    summary = failure_summary(session, experiment)
    assert (summary.run_count, summary.failed, summary.unclassified) == (6, 4, 1)
    assert summary.swept == ["strategy", "gpus"]
    assert [group.kind for group in summary.kinds] == [FailureKind.out_of_memory, FailureKind.time_limit]
    memory = summary.kinds[0]
    assert memory.summary == "2 of 6 out of memory: fsdp, 4 GPUs"
    assert memory.advice == ADVICE[FailureKind.out_of_memory]
    assert [point.coordinate for point in memory.points] == [{"strategy": "fsdp", "gpus": 4}]
    assert summary.kinds[1].summary == "1 of 6 time limit: ddp, 2 GPUs"


def test_a_run_that_runs_again_loses_its_kind(session, tmp_path):
    experiment = _experiment(session, "continue")
    run = run_row(
        session,
        experiment,
        tmp_path / "r",
        state=RunState.node_fail,
        job_id="7",
        ingest_done=True,
        failure_kind=FailureKind.node_failure,
        failure_detail="Slurm ended the job because a node failed",
    )
    # Slurm requeued it: how it ends is to be seen.
    apply_status(run, JobStatus(RunState.pending, "PENDING", "BeginTime"))
    assert (run.failure_kind, run.failure_detail, run.ingest_done) == (None, None, False)
