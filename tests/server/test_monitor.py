"""The monitor's cycle: one poll for all live runs, one accounting call for the ended ones, then the new metric
lines, until a run's last line."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime, timedelta

import pytest
from sqlmodel import Session, col, select

from contract.records import EndRecord, format_record
from contract.states import RunState
from server.config import Settings
from server.main import create_app
from server.models import Metric, Run, RunAccounting, utcnow
from server.monitor import REQUEUE_WINDOW, Monitor, pause_after
from server.scheduler.commands import run_command
from server.scheduler.naming import job_name
from server.scheduler.slurm import SlurmScheduler
from server.services import accounting
from tests.factories import batch_script, experiment_row, run_row, wait_final


def submitted_run(session, tmp_path, scheduler, body: str) -> Run:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    script = run_dir / "job.sbatch"
    script.write_text(f"#!/bin/bash\n{body}\n")
    job_id = scheduler.submit(script, run_dir)
    return run_row(session, experiment_row(session), run_dir, job_id=job_id, scheduler=scheduler.name)


def run_until_final(monitor: Monitor, engine, run_id: str, timeout_s: float = 20) -> Run:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        monitor.cycle()
        with Session(engine) as session:
            run = session.get(Run, run_id)
            if run is not None and run.ingest_done:
                return run
        time.sleep(0.05)
    raise AssertionError("the run was not finished and read within the time")


def test_follows_a_job_to_its_end_and_reads_every_line(engine, session, tmp_path, local_scheduler):
    end = format_record(EndRecord(status="completed", total_time_s=0.1))
    # Two seconds: long enough that the monitor's first cycle sees the job running even on a loaded machine.
    run = submitted_run(
        session, tmp_path, local_scheduler, f"echo '[METRIC] epoch=1 loss=2.0 time=0.1'; sleep 2; echo '{end}'"
    )
    monitor = Monitor(engine, local_scheduler, interval_s=0.1)
    done = run_until_final(monitor, engine, run.id)
    assert done.state is RunState.completed
    assert done.started_at is not None and done.ended_at is not None
    with Session(engine) as check:
        kinds = check.exec(select(Metric.kind).where(Metric.run_id == run.id).order_by(col(Metric.offset))).all()
    assert kinds == ["epoch", "end"]


def test_failed_job_ends_failed_with_exit_code(engine, session, tmp_path, local_scheduler):
    run = submitted_run(session, tmp_path, local_scheduler, "exit 7")
    done = run_until_final(Monitor(engine, local_scheduler, 0.1), engine, run.id)
    assert (done.state, done.exit_code, done.scheduler_state) == (RunState.failed, "7:0", "FAILED")


# Apptainer's words when the job's user cannot read the image, as the 24.11 cluster's nodes printed them (exit 255).
APPTAINER_UNREADABLE = (
    "FATAL:   While checking container encryption: could not open image /shared/images/private.sif: "
    "/shared/images/private.sif is not readable by the current user, check permissions"
)


def test_a_worker_run_whose_container_never_started_says_the_runtimes_reason_and_what_to_do(
    engine, session, tmp_path, local_scheduler
):
    body = f"echo 'INFO:    Using cached SIF image' >&2; echo '{APPTAINER_UNREADABLE}' >&2; exit 255"
    run = submitted_run(session, tmp_path, local_scheduler, body)
    done = run_until_final(Monitor(engine, local_scheduler, 0.1), engine, run.id)
    assert (done.state, done.exit_code) == (RunState.failed, "255:0")
    head, _, tail = (done.message or "").partition("\n")
    assert head == (
        f"the job exited with code 255; the container runtime did not start it: {APPTAINER_UNREADABLE}; the image "
        "must be readable by the user the job runs as: make it so (chmod o+r, or a group of that user's), or point "
        "the profile's container.image at a copy that user can read; the last lines of its output:"
    )
    assert tail.splitlines()[-1] == APPTAINER_UNREADABLE


def test_a_worker_runs_own_error_stays_its_message(engine, session, tmp_path, local_scheduler):
    end = format_record(EndRecord(status="failed", total_time_s=0.1, error="ValueError: no data"))
    run = submitted_run(session, tmp_path, local_scheduler, f"echo 'ERROR: ignored'; echo '{end}'; exit 1")
    done = run_until_final(Monitor(engine, local_scheduler, 0.1), engine, run.id)
    assert (done.state, done.message) == (RunState.failed, "the worker reported: ValueError: no data")


def test_unreachable_scheduler_changes_no_state(engine, session, tmp_path):
    """slurmctld down: squeue times out; runs must stay as they were, never be marked failed."""

    def controller_down(argv):
        return subprocess.CompletedProcess(
            argv, 1, "", "squeue: error: Unable to contact slurm controller (connect failure)"
        )

    scheduler = SlurmScheduler(run=controller_down)
    experiment = experiment_row(session)
    run = run_row(session, experiment, tmp_path, state=RunState.running, job_id="42")
    Monitor(engine, scheduler, 0.1).cycle()
    session.refresh(run)
    assert (run.state, run.ingest_done) == (RunState.running, False)


def test_jobs_unknown_to_the_scheduler_keep_their_state_for_a_while(engine, session, tmp_path, local_scheduler):
    run = run_row(
        session, experiment_row(session), tmp_path, state=RunState.pending, job_id="local-gone", scheduler="local"
    )
    monitor = Monitor(engine, local_scheduler, 0.1)
    monitor.cycle()
    session.refresh(run)
    assert run.state is RunState.pending
    monitor.unknown_job_after = timedelta(0)  # then past the window: the run ends, saying where nothing was found
    monitor.cycle()
    ended = session.get(Run, run.id, populate_existing=True)
    assert ended is not None and ended.state is RunState.failed
    assert ended.message is not None and "the local scheduler's job files have had no trace of it" in ended.message


def test_an_unreachable_scheduler_is_asked_less_often_until_it_answers(engine, session, tmp_path):
    calls = []
    down = True

    def controller(argv):
        calls.append(argv[0])
        if down:
            return subprocess.CompletedProcess(argv, 1, "", "squeue: error: Unable to contact slurm controller")
        return subprocess.CompletedProcess(argv, 0, "42|RUNNING|None\n", "")

    run = run_row(session, experiment_row(session), tmp_path, state=RunState.pending, job_id="42")
    monitor = Monitor(engine, SlurmScheduler(run=controller), interval_s=0.1)
    monitor.cycle()
    monitor.cycle()  # within the back-off: not asked again
    assert (calls, monitor.scheduler_failures) == (["squeue"], 1)
    time.sleep(0.25)
    monitor.cycle()
    assert (len(calls), monitor.scheduler_failures) == (2, 2)  # the wait doubles: 0.4 s now
    down = False
    time.sleep(0.45)
    monitor.cycle()
    assert monitor.scheduler_failures == 0
    session.refresh(run)
    assert run.state is RunState.running


def test_preempted_runs_stay_followed_for_a_while(engine, session, tmp_path, local_scheduler):
    experiment = experiment_row(session)
    recent = run_row(session, experiment, tmp_path / "a", state=RunState.preempted, job_id="1", ended_at=utcnow())
    run_row(session, experiment, tmp_path / "b", state=RunState.preempted, job_id="2",
            ended_at=utcnow() - REQUEUE_WINDOW - timedelta(seconds=1))  # fmt: skip
    run_row(session, experiment, tmp_path / "c", state=RunState.failed, job_id="3", ended_at=utcnow())
    monitor = Monitor(engine, SlurmScheduler(), 1.0)
    assert [run.id for run in monitor._followed(session)] == [recent.id]


@pytest.mark.slurm
def test_one_sacct_a_cycle_accounts_for_every_run_that_ended(slurm, engine, session, tmp_path, monkeypatch):
    monkeypatch.setattr(accounting, "SETTLE", timedelta(seconds=3))  # the service's wait, shortened for the test
    calls: list[tuple[list[str], float]] = []

    def counted(argv):
        started = time.perf_counter()
        result = run_command(argv)
        calls.append((list(argv), time.perf_counter() - started))
        return result

    scheduler = SlurmScheduler(run=counted)
    experiment = experiment_row(session)
    runs = []
    for position in range(4):
        run_dir = tmp_path / str(position)
        run_dir.mkdir()
        run = run_row(session, experiment, run_dir, position=position)
        run.job_id = scheduler.submit(batch_script(run_dir, "srun true", name=job_name(run.id)), run_dir)
        run.submitted_at = utcnow()
        session.add(run)
        session.commit()
        runs.append(run)
    wait_final(scheduler, [run.job_id for run in runs if run.job_id])
    monitor = Monitor(engine, scheduler, interval_s=0.1)
    per_cycle = []
    deadline = time.monotonic() + 30
    while len(session.exec(select(RunAccounting)).all()) < len(runs):
        assert time.monotonic() < deadline, "the runs were not accounted for within 30 s"
        calls.clear()
        monitor.cycle()
        per_cycle.append([seconds for argv, seconds in calls if argv[0] == "sacct" and "--state=RUNNING" in argv])
        time.sleep(0.5)
    # At most one sacct a cycle for all four; a run whose job slurmdbd has not written yet (it lags under load) is
    # asked about again in a later cycle's one call, never in a call of its own.
    assert all(len(cycle) <= 1 for cycle in per_cycle), per_cycle
    asked = [seconds for cycle in per_cycle for seconds in cycle]
    assert 1 <= len(asked) < len(runs), per_cycle
    for run in runs:
        session.refresh(run)
        row = session.get(RunAccounting, run.id)
        assert run.nodes and row is not None and row.nodes == run.nodes and row.job_id == run.job_id
    calls.clear()
    monitor.cycle()  # accounted for: not asked again
    assert not [argv for argv, _ in calls if "--state=RUNNING" in argv]


# Above Slurm's largest job id (MaxJobId, 67043328 by default): a job id neither squeue nor sacct can know.
NEVER_ISSUED_JOB_ID = "67100000"


@pytest.mark.slurm
def test_a_job_neither_squeue_nor_sacct_knows_ends_its_run_after_a_while_saying_so(slurm, engine, session, tmp_path):
    """Its run is not asked about forever: past the monitor's window it fails with a message that says what to do,
    and the next cycle asks Slurm nothing."""
    calls: list[str] = []

    def counted(argv):
        calls.append(argv[0])
        return run_command(argv)

    run = run_row(session, experiment_row(session), tmp_path, state=RunState.pending, job_id=NEVER_ISSUED_JOB_ID,
                  submitted_at=utcnow())  # fmt: skip
    monitor = Monitor(engine, SlurmScheduler(run=counted), 0.1)
    monitor.cycle()
    session.refresh(run)
    assert run.state is RunState.pending  # within the window: Slurm may still come to know it
    monitor.unknown_job_after = timedelta(0)
    monitor.cycle()
    ended = session.get(Run, run.id, populate_existing=True)
    assert ended is not None and ended.state is RunState.failed and ended.ended_at is not None
    assert ended.message is not None
    assert f"job {NEVER_ISSUED_JOB_ID}" in ended.message and "squeue" in ended.message and "sacct" in ended.message
    assert "Resubmit" in ended.message
    calls.clear()
    monitor.cycle()
    assert calls == []  # ended: neither squeue nor sacct is asked about it again


def test_the_window_for_unknown_jobs_is_a_setting(settings, local_scheduler, monkeypatch):
    monkeypatch.setenv("SCALELAB_UNKNOWN_JOB_AFTER_S", "90")
    configured = Settings(**settings.model_dump(exclude={"unknown_job_after_s"}))
    app = create_app(configured, local_scheduler, start_monitor=False)
    assert app.state.monitor.unknown_job_after == timedelta(seconds=90)


def stale_record(job_id: str, run_id: str, node: str) -> dict[str, str]:
    """The accounting record a job with this id left before the controller's state was wiped: a day older."""
    submitted = (datetime.now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")  # sacct's local time
    return {
        "JobID": job_id, "State": "COMPLETED", "Reason": "None", "ExitCode": "0:0", "NodeList": node,
        "Submit": submitted, "JobName": job_name(run_id),
    }  # fmt: skip


def with_stale_record(record: dict[str, str]):
    """Real Slurm commands, and sacct answering as it would with that older record in slurmdbd as well: only the
    most recent job of an id asked for by --jobs, all of them with --duplicates (sacct's man page)."""

    def runner(argv):
        result = run_command(argv)
        asked = [job for arg in argv if arg.startswith("--jobs=") for job in arg.removeprefix("--jobs=").split(",")]
        if argv[0] != "sacct" or record["JobID"] not in asked or result.returncode != 0:
            return result
        fields = next(arg.removeprefix("--format=").split(",") for arg in argv if arg.startswith("--format="))
        newer = any(line.split("|")[0] == record["JobID"] for line in result.stdout.splitlines())
        if newer and "--duplicates" not in argv:
            return result
        line = "|".join(record.get(field, "") for field in fields)
        return subprocess.CompletedProcess(argv, 0, f"{line}\n{result.stdout}", result.stderr)

    return runner


@pytest.mark.slurm
def test_a_reused_job_id_is_told_apart_by_its_name(slurm, engine, session, tmp_path):
    """After a controller's state was wiped, job ids start again: the database's old run and a new run hold the same
    id. Each gets its own job's state: the old one its record in the accounting database, the new one the queue's."""
    experiment = experiment_row(session)
    long_ago = utcnow() - timedelta(days=2)
    old = run_row(session, experiment, tmp_path / "old", state=RunState.running, created_at=long_ago)
    new = run_row(session, experiment, tmp_path / "new", position=1)
    (tmp_path / "new").mkdir()
    script = tmp_path / "new" / "job.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --job-name={job_name(new.id)}\n#SBATCH --hold\n#SBATCH --time=1\ntrue\n")
    job_id = SlurmScheduler().submit(script, tmp_path / "new")
    try:
        for run in (old, new):
            run.job_id = job_id
            session.add(run)
        session.commit()
        node = subprocess.run(["sinfo", "--noheader", "--format=%n"], capture_output=True, text=True, check=True)
        stale = with_stale_record(stale_record(job_id, old.id, node.stdout.split()[0]))
        Monitor(engine, SlurmScheduler(run=stale), 0.1).cycle()
        session.refresh(old)
        session.refresh(new)
        assert (new.state, new.scheduler_reason) == (RunState.pending, "JobHeldUser")
        assert (old.state, old.exit_code) == (RunState.completed, "0:0")
    finally:
        SlurmScheduler().cancel(job_id)


@pytest.mark.slurm
def test_a_run_gets_its_own_jobs_accounting_not_that_of_another_job_of_its_id(
    slurm, engine, session, tmp_path, monkeypatch
):
    """A controller wiped while the run ran gives its id to a new job on the same node: the accounting query by
    nodes and time has both. The run's figures are those of the job named after it; the other one shared the node."""
    monkeypatch.setattr(accounting, "SETTLE", timedelta(seconds=3))  # the service's wait, shortened for the test
    run = run_row(session, experiment_row(session), tmp_path, submitted_at=utcnow())
    run.job_id = SlurmScheduler().submit(batch_script(tmp_path, "srun true", name=job_name(run.id)), tmp_path)
    session.add(run)
    session.commit()
    wait_final(SlurmScheduler(), [run.job_id])

    def with_another_job_of_its_id(argv):
        result = run_command(argv)
        if argv[0] != "sacct" or "--state=RUNNING" not in argv or result.returncode != 0:
            return result
        fields = next(arg.removeprefix("--format=").split(",") for arg in argv if arg.startswith("--format="))
        own = next((line.split("|") for line in result.stdout.splitlines() if line.startswith(f"{run.job_id}|")), None)
        if own is None:
            return result  # slurmdbd has not written the job yet: asked again next cycle
        row = dict(zip(fields, own, strict=False)) | {"AllocCPUS": "99", "MaxRSS": "9999999999", "JobName": "other"}
        return subprocess.CompletedProcess(argv, 0, result.stdout + "|".join(row[f] for f in fields) + "\n", "")

    monitor = Monitor(engine, SlurmScheduler(run=with_another_job_of_its_id), interval_s=0.1)
    deadline = time.monotonic() + 30
    while session.get(RunAccounting, run.id, populate_existing=True) is None:
        assert time.monotonic() < deadline, "the run was not accounted for within 30 s"
        monitor.cycle()
        time.sleep(0.5)
    row = session.get(RunAccounting, run.id)
    assert row is not None and row.job_id == run.job_id
    assert (row.alloc_cpus, row.max_rss_bytes != 9999999999) == (1, True)
    # The other job of that id was on the same node at the same time (others' jobs on the shared cluster may be too).
    assert run.job_id in row.shared_with


def test_cycles_start_an_interval_apart_and_a_long_one_leaves_a_tenth_of_one():
    assert pause_after(2.0, 0.5) == 1.5
    assert pause_after(2.0, 0.0) == 2.0
    assert pause_after(2.0, 1.95) == pytest.approx(0.2)  # at least a tenth: a slow database is not asked at once
    assert pause_after(2.0, 7.0) == pytest.approx(0.2)
