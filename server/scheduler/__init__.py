"""The scheduler boundary: submit a script, poll many jobs at once, cancel one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from contract.states import RunState


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


class Scheduler(Protocol):
    name: str
    # How many submissions may run at once: sbatch spends much of its time outside slurmctld, so a few at a time
    # submit a sweep faster than one by one.
    submit_concurrency: int

    def submit(self, script: Path, run_dir: Path) -> str:
        """Submit the batch script; return the job id."""
        ...

    def poll(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """The status of each job the scheduler knows; jobs it cannot account for yet are left out."""
        ...

    def cancel(self, job_id: str) -> None: ...

    def ping(self) -> None:
        """Return if the scheduler answers; raise SchedulerUnavailable saying why if it does not. Cheap: /readyz
        calls it on every probe."""
        ...

    def jobs_of(self, run_ids: Sequence[str]) -> dict[str, str]:
        """The job ids of the given runs' jobs that the scheduler has (by the job name it gave them), in one call:
        how a restarted server finds a job whose submission it could not record."""
        ...
