"""The scheduler through Slurm's own commands: sbatch, squeue, sacct, scancel."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from server.scheduler import EndedJob, Job, JobAccounting, JobStatus, SchedulerError, SchedulerUnavailable, statuses_of
from server.scheduler.commands import (
    Runner,
    failure,
    first_line,
    job_ids,
    jobs_by_name,
    ping_controller,
    run_command,
    status_rows,
)
from server.scheduler.naming import NO_ARRAYS, ArrayTasks, job_name, jobs_by_run
from server.scheduler.sacct import ended_jobs_named, sacct_accounting, sacct_statuses


class SlurmScheduler:
    name = "slurm"
    # Measured here: 100 sbatch calls took 0.64 s one by one, 0.30 s two at a time, 0.27 s four at a time.
    submit_concurrency = 4
    runs_as_user = False  # jobs run as the service: the user is ignored
    uses_slurm = True
    # An array's script goes to sbatch as any other, which answers the array's job id (server/services/arrays.py).
    submits_arrays = True

    def __init__(self, run: Runner = run_command) -> None:
        # The runner is the subprocess boundary; tests replace it only to inject failures Slurm cannot make.
        self._run = run

    def submit(self, script: Path, run_dir: Path, user: str | None = None) -> str:
        result = self._run(["sbatch", "--parsable", f"--chdir={run_dir}", str(script)])
        if result.returncode != 0:
            unreachable = failure("sbatch", result)
            if isinstance(unreachable, SchedulerUnavailable):
                raise unreachable
            raise SchedulerError(f"sbatch refused the job: {result.stderr.strip() or result.stdout.strip()}")
        # --parsable prints "jobid" or "jobid;cluster".
        job_id = first_line(result.stdout).split(";")[0]
        if not job_id.isdigit():
            raise SchedulerError(f"sbatch printed no job id: {result.stdout.strip()!r}")
        return job_id

    def poll(self, jobs: Sequence[Job]) -> dict[Job, JobStatus]:
        if not jobs:
            return {}
        queued = statuses_of(jobs, self._squeue(job_ids(jobs)))
        # A job that ended stays in squeue a while (MinJobAge) with Slurm's reason (TimeLimit, NodeDown,
        # OutOfMemory), but without its exit code: the accounting database has that. One sacct asks about those
        # and about the jobs that left the queue, or whose id the queue now gives another job.
        found = {job: status for job, status in queued.items() if not status.state.is_final}
        ask = [job for job in jobs if job not in found]
        if not ask:
            return found
        for job, status in sacct_statuses(ask, self._run).items():
            in_queue = queued.get(job)
            if in_queue is not None and not status.state.is_final:
                continue  # the accounting database has not caught up yet: ask again next cycle
            found[job] = replace(status, reason=status.reason or (in_queue.reason if in_queue else None))
        return found

    def _squeue(self, job_ids: Sequence[str]) -> list[tuple[str, JobStatus]]:
        # --me: every job of this scheduler runs as the service's own account, and with one user named squeue asks
        # slurmctld for that user's jobs alone (REQUEST_JOB_USER_INFO), so neither the controller's answer nor
        # squeue's work grows with other users' jobs; --jobs alone (more than one id) fetches the whole job table
        # and filters it in squeue. (As root, uid 0, squeue fetches the whole table either way.)
        result = self._run(
            # --array: a row per array task, pending ones too, where squeue would fold them into "123_[2-15]".
            ["squeue", "--noheader", "--states=all", "--array", "--me", f"--jobs={','.join(job_ids)}",
             "--format=%i|%T|%r|%N|%V|%j"]
        )  # fmt: skip
        if result.returncode != 0:
            # squeue exits 1 when it is asked about a single id it no longer knows: that job left the queue.
            if "Invalid job id" in result.stderr:
                return []
            raise failure("squeue", result)
        return status_rows(result.stdout, "squeue", with_exit_code=False)

    def ping(self) -> None:
        ping_controller(self._run)

    def cancel(self, job_id: str, user: str | None = None) -> None:
        result = self._run(["scancel", job_id])
        if result.returncode != 0:
            raise failure(f"scancel {job_id}", result)

    def signal(self, job_id: str, signal_name: str, user: str | None = None) -> None:
        # Without --batch or --full, scancel signals the tasks of every step of the job (each rank srun started),
        # and not the batch step's shell.
        result = self._run(["scancel", f"--signal={signal_name}", job_id])
        if result.returncode != 0:
            raise failure(f"scancel --signal={signal_name} {job_id}", result)

    def jobs_of(self, run_ids: Sequence[str], arrays: ArrayTasks = NO_ARRAYS) -> dict[str, str]:
        if not run_ids and not arrays:
            return {}
        # The runs' own jobs and the arrays, by their names, in one squeue and one sacct.
        names = [*(job_name(run_id) for run_id in run_ids), *arrays]
        # --states=all: a job that ended lately is still in the queue (MinJobAge), where slurmdbd may not have it yet;
        # squeue alone shows only pending and running ones. %F: an array's id on each row of its tasks (%i says
        # 123_4, or 123_[5-15] for the pending ones).
        queued = self._run(["squeue", "--noheader", "--states=all", f"--name={','.join(names)}", "--format=%j|%F"])
        if queued.returncode != 0:
            raise failure("squeue", queued)
        # The queue's answer comes last and wins.
        named = ended_jobs_named(names, self._run) | jobs_by_name(queued.stdout, set(names))
        return jobs_by_run(named, run_ids, arrays)

    def accounting(self, jobs: Sequence[EndedJob]) -> dict[str, JobAccounting]:
        return sacct_accounting(jobs, self._run)
