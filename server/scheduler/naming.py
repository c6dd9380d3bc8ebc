"""What scalelab names a run's job, and the run a job's name tells: how a restarted server finds a job it could not
record, and what tells its job apart from another that Slurm gave the same id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# Runs that went as tasks of arrays, by the array's job name: each one's task index. How a restarted server asks
# for the runs whose array it submitted but could not record (server/services/arrays.py).
ArrayTasks = Mapping[str, Mapping[str, int]]
NO_ARRAYS: ArrayTasks = {}

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


def task_job_id(array_job_id: str, index: int) -> str:
    """The job id of task `index` of an array: what its run holds, as Slurm names it."""
    return f"{array_job_id}_{index}"


def jobs_by_run(named: Mapping[str, str], run_ids: Sequence[str], arrays: ArrayTasks = NO_ARRAYS) -> dict[str, str]:
    """From job ids by job name (an array's id by the array's name): by run id, the job of each run's own, else its
    task of one of `arrays` that was found. A job of the run's own wins: it is the later (a task an earlier server
    missed and never recorded was submitted again alone)."""
    found: dict[str, str] = {}
    for name, tasks in arrays.items():
        array_job_id = named.get(name)
        if array_job_id is not None:
            found |= {run_id: task_job_id(array_job_id, index) for run_id, index in tasks.items()}
    for run_id in run_ids:
        own = named.get(job_name(run_id))
        if own is not None:
            found[run_id] = own
    return found
