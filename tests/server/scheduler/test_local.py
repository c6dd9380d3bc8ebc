"""The embedded scheduler with real processes: exit codes, time limits, cancellation, restarts."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from contract.rundir import OUTPUT_FILE
from contract.states import RunState
from server.processes import process_runs
from server.scheduler import Job, JobStatus, SchedulerError
from server.scheduler.local import LocalScheduler


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.sbatch"
    path.write_text(f"#!/bin/bash\n{body}\n")
    return path


def wait_final(scheduler: LocalScheduler, job_id: str, timeout_s: float = 20) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = scheduler.poll([Job(job_id)])[Job(job_id)]
        if status.state.is_final:
            return status
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not end within {timeout_s} s")


def test_completed_job_and_its_output(tmp_path, local_scheduler):
    job = local_scheduler.submit(script(tmp_path, "echo hello; echo oops >&2"), tmp_path)
    assert wait_final(local_scheduler, job) == JobStatus(RunState.completed, "COMPLETED", exit_code="0:0")
    assert (tmp_path / OUTPUT_FILE).read_text().splitlines() == ["hello", "oops"]


def test_failed_job_keeps_its_exit_code(tmp_path, local_scheduler):
    job = local_scheduler.submit(script(tmp_path, "exit 3"), tmp_path)
    status = wait_final(local_scheduler, job)
    assert (status.state, status.exit_code) == (RunState.failed, "3:0")


def test_time_limit_exit_is_a_timeout(tmp_path, local_scheduler):
    job = local_scheduler.submit(script(tmp_path, "exec timeout 0.2 sleep 30"), tmp_path)
    assert wait_final(local_scheduler, job).state is RunState.timeout


def test_running_then_cancelled(tmp_path, local_scheduler):
    job = local_scheduler.submit(script(tmp_path, "sleep 30"), tmp_path)
    assert local_scheduler.poll([Job(job)])[Job(job)].state is RunState.running
    local_scheduler.cancel(job)
    assert wait_final(local_scheduler, job, timeout_s=5).state is RunState.cancelled


def test_cancelling_stops_what_the_launchers_timeout_runs_in_a_group_of_its_own(tmp_path, local_scheduler):
    # The local launcher runs the training under `timeout`, which puts it in a process group of its own.
    job = local_scheduler.submit(script(tmp_path, "timeout 600 sleep 300 & echo $! > timeout.pid; wait"), tmp_path)
    pid_file = tmp_path / "timeout.pid"
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the job did not start its timeout"
        time.sleep(0.05)
    launcher = int(pid_file.read_text())
    assert os.getpgid(launcher) == launcher  # its own group: a signal to the job's group alone misses it
    local_scheduler.cancel(job)
    assert wait_final(local_scheduler, job, timeout_s=5).state is RunState.cancelled
    deadline = time.monotonic() + 5
    while process_runs(launcher):
        assert time.monotonic() < deadline, "the job's timeout (and its sleep) still run after the cancel"
        time.sleep(0.05)


def test_a_new_scheduler_instance_knows_how_jobs_ended(tmp_path, local_scheduler, settings):
    job = local_scheduler.submit(script(tmp_path, "exit 0"), tmp_path)
    wait_final(local_scheduler, job)
    restarted = LocalScheduler(settings.runs_dir / ".local-jobs")
    assert restarted.poll([Job(job)])[Job(job)].state is RunState.completed


def test_unknown_jobs_are_left_out(local_scheduler):
    assert local_scheduler.poll([Job("local-nonexistent")]) == {}
    with pytest.raises(SchedulerError, match="no local job"):
        local_scheduler.cancel("local-nonexistent")
