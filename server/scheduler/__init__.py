"""The scheduler boundary: submit a script, poll many jobs at once, cancel one, account for ended jobs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from contract.states import RunState
from server.scheduler.naming import NO_ARRAYS, ArrayTasks


class SchedulerError(RuntimeError):
    """The scheduler refused or could not be reached; the message is for the user."""


class SchedulerUnavailable(SchedulerError):
    """The scheduler could not be reached at all (e.g. slurmctld is down): trying again later may work."""


@dataclass(frozen=True)
class JobStatus:
    state: RunState
    raw_state: str
    reason: str | None = None
    exit_code: str | None = None
    # Where the job runs or ran, as the scheduler writes it ("node[1-2]"); None before it has nodes. Not part of
    # the job's state: statuses compare equal without it.
    nodes: str | None = field(default=None, compare=False)
    # What tells this job apart from another that Slurm gave the same id (see Job); None where the scheduler did
    # not say. Not part of the job's state either.
    name: str | None = field(default=None, compare=False)
    submitted: datetime | None = field(default=None, compare=False)  # aware


# Slurm's submit times are whole seconds, and the clock of the host that keeps them may differ a little from ours.
CLOCK_MARGIN = timedelta(minutes=2)


@dataclass(frozen=True)
class Job:
    """A job to ask the scheduler about, and what tells it apart from another job with the same id: when a
    controller's state is wiped, Slurm numbers jobs from 1 again while slurmdbd keeps the old jobs' records."""

    job_id: str
    name: str | None = None  # the name scalelab gave it (scalelab-<run id>); None: whatever its name
    # Aware: when its run was made, so the job cannot have been submitted before; None: at any time.
    created: datetime | None = None

    def is_described_by(self, status: JobStatus) -> bool:
        """Whether a record of this job's id is this job's: nothing the record says (its name, its submit time)
        contradicts what the job is known to be."""
        if self.name is not None and status.name is not None and status.name != self.name:
            return False
        return self.created is None or status.submitted is None or status.submitted >= self.created - CLOCK_MARGIN


def statuses_of(jobs: Sequence[Job], records: Iterable[tuple[str, JobStatus]]) -> dict[Job, JobStatus]:
    """Each job's status among the scheduler's records (job id, status): the latest submitted of the records of
    its id that are its own (a requeued job has a record per submission, sacct's "duplicates"); a job none of
    whose records is its own is left out."""
    by_id: dict[str, list[Job]] = {}
    for job in jobs:
        by_id.setdefault(job.job_id, []).append(job)
    found: dict[Job, JobStatus] = {}
    for job_id, status in records:
        for job in by_id.get(job_id, []):
            if not job.is_described_by(status):
                continue
            current = found.get(job)
            if current is None or not _submitted_before(status, current):
                found[job] = status
    return found


def _submitted_before(status: JobStatus, other: JobStatus) -> bool:
    """Whether a record's submission is older than another's; without both times, the later record counts."""
    return status.submitted is not None and other.submitted is not None and status.submitted < other.submitted


@dataclass(frozen=True)
class EndedJob:
    """A job that ended, with what scalelab saw of it: where it ran and a window its run lies within."""

    job_id: str
    nodes: str  # as the scheduler wrote them while the job ran
    # Aware datetimes bounding the job's run: submitted (it cannot start earlier) and seen ended (not earlier).
    start: datetime
    end: datetime
    # The name scalelab gave it: which of the records of its id is its own (see Job); None: the latest.
    name: str | None = None


@dataclass(frozen=True)
class JobAccounting:
    """What the scheduler's accounting says an ended job used; None where the cluster did not gather a figure."""

    nodes: str
    start: datetime | None
    end: datetime | None
    elapsed_s: int
    alloc_cpus: int
    total_cpu_s: float
    max_rss_bytes: int | None
    gpu_util: float | None
    gpu_mem_bytes: int | None
    energy_j: int | None
    # The other jobs that ran on one of its nodes while it ran, by id.
    shared_with: tuple[str, ...] = ()


class Scheduler(Protocol):
    name: str
    # How many submissions may run at once: sbatch spends much of its time outside slurmctld, so a few at a time
    # submit a sweep faster than one by one.
    submit_concurrency: int
    # True: each job runs as its run's owner (a Unix user), so submit and cancel need the user; False: jobs run
    # as the service itself, and the user is ignored.
    runs_as_user: bool
    # True: jobs run in Slurm allocations, their tasks started by srun (in the profile's container, if any);
    # False: a job's script runs as a plain process on this host, without srun or containers.
    uses_slurm: bool

    def submit(self, script: Path, run_dir: Path, user: str | None) -> str:
        """Submit the batch script as `user` (the run's owner); return the job id."""
        ...

    def poll(self, jobs: Sequence[Job]) -> dict[Job, JobStatus]:
        """The status of each job the scheduler knows, told apart from other jobs of the same id by its name and
        submit time; jobs it cannot account for (yet, or any more) are left out."""
        ...

    def cancel(self, job_id: str, user: str | None) -> None:
        """Cancel the job, as `user` (the run's owner) where jobs run as their users."""
        ...

    def signal(self, job_id: str, signal_name: str, user: str | None) -> None:
        """Send the signal (a name such as "USR2") to every task of the job's steps, as `user` where jobs run as
        their users; not to its batch script, whose shell would end of a signal it does not catch."""
        ...

    def ping(self) -> None:
        """Return if the scheduler answers; raise SchedulerUnavailable saying why if it does not. Cheap: /readyz
        calls it on every probe."""
        ...

    def jobs_of(self, run_ids: Sequence[str], arrays: ArrayTasks = NO_ARRAYS) -> dict[str, str]:
        """The job ids of the given runs' jobs that the scheduler has (by the job name it gave them), in one call:
        how a restarted server finds a job whose submission it could not record. `arrays`: runs that may have gone
        as tasks of arrays, by the array's name; a run found so gets its task's id (`<array job>_<index>`). A
        scheduler that submits no arrays (submits_arrays) has none to find."""
        ...

    def accounting(self, jobs: Sequence[EndedJob]) -> dict[str, JobAccounting]:
        """The accounting of each given job the scheduler has a record of, in ONE call for all of them (the
        monitor asks once a cycle); a scheduler without accounting returns {}."""
        ...
