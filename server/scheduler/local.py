"""The embedded scheduler for a machine without Slurm: runs each job's script on this machine.

Its bookkeeping lives in files beside the jobs, so a restarted server still knows how its jobs ended.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from contract.rundir import OUTPUT_FILE
from contract.states import RunState
from server.processes import childless_of_session, process_groups_of_session, process_runs
from server.scheduler import EndedJob, Job, JobAccounting, JobStatus, SchedulerError
from server.scheduler.naming import NO_ARRAYS, ArrayTasks

# What `timeout` exits with when the limit is reached (the local launcher wraps the worker in it).
TIMEOUT_EXIT = 124


class LocalScheduler:
    name = "local"
    submit_concurrency = 1
    runs_as_user = False  # jobs run as the service: the user is ignored
    uses_slurm = False

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def _file(self, job_id: str, suffix: str) -> Path:
        return self.state_dir / f"{job_id}.{suffix}"

    def submit(self, script: Path, run_dir: Path, user: str | None = None) -> str:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        job_id = f"local-{secrets.token_hex(5)}"  # ten hex digits, as random as a run's id
        exit_file = self._file(job_id, "exit")
        # The wrapper records the exit status itself: the server may restart before the job ends.
        wrapper = 'bash "$1"; status=$?; echo "$status" > "$2.tmp" && mv "$2.tmp" "$2"'
        with (run_dir / OUTPUT_FILE).open("ab") as output:
            child = subprocess.Popen(
                ["bash", "-c", wrapper, "scalelab-local", str(script), str(exit_file)],
                cwd=run_dir,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._children[job_id] = child
        self._file(job_id, "pid").write_text(str(child.pid))
        self._file(job_id, "run").write_text(run_dir.name)
        return job_id

    def _status(self, job_id: str) -> JobStatus | None:
        child = self._children.get(job_id)
        if child is not None and child.poll() is not None:
            del self._children[job_id]  # reaped: no zombie left behind
        if self._file(job_id, "cancelled").exists():
            return JobStatus(RunState.cancelled, "CANCELLED", exit_code="0:15")
        exit_file = self._file(job_id, "exit")
        if exit_file.exists():
            code = int(exit_file.read_text().strip() or "1")
            if code == 0:
                return JobStatus(RunState.completed, "COMPLETED", exit_code="0:0")
            if code == TIMEOUT_EXIT:
                return JobStatus(RunState.timeout, "TIMEOUT", exit_code=f"{code}:0")
            return JobStatus(RunState.failed, "FAILED", exit_code=f"{code}:0")
        pid_file = self._file(job_id, "pid")
        if not pid_file.exists():
            return None
        if process_runs(int(pid_file.read_text())):
            return JobStatus(RunState.running, "RUNNING")
        return JobStatus(RunState.failed, "FAILED", reason="the job's process vanished without an exit status")

    def poll(self, jobs: Sequence[Job]) -> dict[Job, JobStatus]:
        # Its job ids are random and never given twice: the id alone tells a job apart.
        found = {job: self._status(job.job_id) for job in jobs}
        return {job: status for job, status in found.items() if status is not None}

    def cancel(self, job_id: str, user: str | None = None) -> None:
        pid_file = self._file(job_id, "pid")
        if not pid_file.exists():
            raise SchedulerError(f"no local job {job_id}")
        self._file(job_id, "cancelled").touch()
        # The job leads a session of its own (start_new_session): every group in it, as the launcher's `timeout`
        # runs the training in a group of its own, which a signal to the leader's group alone left running.
        leader = int(pid_file.read_text())
        for group in process_groups_of_session(leader) | {leader}:
            with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
                os.killpg(group, signal.SIGTERM)

    def signal(self, job_id: str, signal_name: str, user: str | None = None) -> None:
        pid_file = self._file(job_id, "pid")
        if not pid_file.exists():
            raise SchedulerError(f"no local job {job_id}")
        # The training processes alone: the shells, `timeout` and torchrun above them would die of a signal they do
        # not catch, and take the job with them.
        for pid in childless_of_session(int(pid_file.read_text())):
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(pid, getattr(signal, f"SIG{signal_name}"))

    def ping(self) -> None:
        """Always ready: the jobs run on this machine, as children of this process."""

    def accounting(self, jobs: Sequence[EndedJob]) -> dict[str, JobAccounting]:
        """Nothing: this machine keeps no accounting, so its runs get none (the pages say not gathered)."""
        return {}

    def jobs_of(self, run_ids: Sequence[str], arrays: ArrayTasks = NO_ARRAYS) -> dict[str, str]:
        # `arrays` is left alone: this scheduler runs one job per run, none as a task of an array.
        wanted = set(run_ids)
        found: dict[str, str] = {}
        for path in self.state_dir.glob("*.run"):
            run_id = path.read_text().strip()
            if run_id in wanted:
                found[run_id] = path.name.removesuffix(".run")
        return found
