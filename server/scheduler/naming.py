"""What scalelab names a run's job, and the run a job's name tells: how a restarted server finds a job it could not
record, and what tells its job apart from another that Slurm gave the same id."""

from __future__ import annotations

PREFIX = "scalelab-"


def job_name(run_id: str) -> str:
    """What Slurm calls the run's job."""
    return f"{PREFIX}{run_id}"


def run_id_of(name: str | None) -> str | None:
    """The run id `job_name` made the name from; None for a name scalelab did not give (or no name)."""
    if name is None or not name.startswith(PREFIX):
        return None
    return name.removeprefix(PREFIX) or None


def array_job_name(first_run_id: str) -> str:
    """What Slurm calls a job array of runs (server/services/arrays.py): its tasks share one name."""
    return f"{PREFIX}array-{first_run_id}"


def is_array_task(job_id: str) -> bool:
    """Whether a job id is an array task's, `<array job>_<task>`."""
    return "_" in job_id
