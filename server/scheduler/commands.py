"""Slurm's commands as subprocesses, shared by every backend that runs them: the runner, what their failures mean
(Slurm unreachable or a request refused), `scontrol ping`, and reading the job rows squeue and sacct print."""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime

from server.scheduler import Job, JobStatus, SchedulerError, SchedulerUnavailable, states

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]
COMMAND_TIMEOUT_S = 30


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise SchedulerUnavailable(f"{argv[0]} is not on PATH: is Slurm installed on this host?") from None
    except subprocess.TimeoutExpired:
        raise SchedulerUnavailable(f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S} s: is slurmctld up?") from None


# What Slurm's commands print when they cannot reach slurmctld or slurmdbd, as opposed to refusing a request.
_UNREACHABLE = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted",
    "Slurm backup controller in standby mode",
    "Problem talking to the database",
)


def failure(command: str, result: subprocess.CompletedProcess[str]) -> SchedulerError:
    said = result.stderr.strip() or result.stdout.strip()
    if any(marker in said for marker in _UNREACHABLE):
        return SchedulerUnavailable(f"Slurm cannot be reached ({command}: {said}); try again when it is back")
    return SchedulerError(f"{command} failed: {said}")


def ping_controller(run: Runner = run_command) -> None:
    """`scontrol ping`: one small RPC to each slurmctld, exit 0 when the primary (or a backup) answers."""
    result = run(["scontrol", "ping"])
    if result.returncode != 0:
        said = first_line(result.stdout) or first_line(result.stderr) or f"exit {result.returncode}"
        raise SchedulerUnavailable(f"scontrol ping: {said}")


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def job_ids(jobs: Sequence[Job]) -> list[str]:
    """The jobs' ids, each once, in order (two runs may hold the same id when one of them is from before a wipe)."""
    return list(dict.fromkeys(job.job_id for job in jobs))


def jobs_by_name(output: str, names: Collection[str]) -> dict[str, str]:
    """The job ids, by job name, in rows of `name|job id` (as squeue and sacct print them), of the jobs with the given
    names; for an array, the array's job id (a row of its tasks says `123_4` or `123_[5-15]`, or `123` as squeue's
    %F prints it). A later row of a name wins."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        name, _, job_id = line.strip().partition("|")
        own = _JOB_OR_ARRAY.match(job_id)
        if name in names and own is not None:
            found[name] = own[1]
    return found


# A job's id, or an array's task or tasks by the array's id.
_JOB_OR_ARRAY = re.compile(r"^(\d+)(?:_(?:\d+|\[[\d,%-]+\]))?$")


def status_rows(output: str, source: str, *, with_exit_code: bool) -> list[tuple[str, JobStatus]]:
    """Rows of `id|state|reason[|exit code][|nodes|submit time|name]`, as (job id, status); the name comes last, so
    a "|" in it stays in it. Unknown states are logged and left out."""
    statuses: list[tuple[str, JobStatus]] = []
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 3:
            continue
        job_id, raw_state, reason = fields[:3]
        rest = fields[3:]
        state = states.from_slurm(raw_state)
        if state is None:
            log.warning("job %s: unknown Slurm state %r from %s", job_id, raw_state, source)
            continue
        exit_code = rest.pop(0) if with_exit_code and rest else None
        nodes = assigned_nodes(rest[0]) if rest else None
        submitted = parse_time(rest[1]) if len(rest) > 1 else None
        name = "|".join(rest[2:]) if len(rest) > 2 else None
        said = None if reason in ("None", "") else reason
        status = JobStatus(state, raw_state, said, exit_code, nodes, name, submitted)
        statuses += [(task, status) for task in array_tasks(job_id)]
    return statuses


# An array's tasks still folded into one row, as Slurm prints pending ones: "123_[2-15]", "123_[0,4-9%2]".
_FOLDED_TASKS = re.compile(r"^(\d+)_\[([\d,-]+)(?:%\d+)?\]$")
# More tasks than Slurm's largest MaxArraySize: a row claiming more is not read as tasks.
_MOST_TASKS = 4_000_001


def array_tasks(job_id: str) -> list[str]:
    """The job ids a row's id stands for: an array's folded tasks one by one (`123_[2-4]` is 123_2, 123_3 and
    123_4), any other id as it is."""
    folded = _FOLDED_TASKS.match(job_id)
    if folded is None:
        return [job_id]
    tasks: list[str] = []
    for part in folded[2].split(","):
        first, _, last = part.partition("-")
        if not first.isdigit() or not (last or first).isdigit():
            return [job_id]
        low, high = int(first), int(last or first)
        if high < low or len(tasks) + high - low + 1 > _MOST_TASKS:
            return [job_id]
        tasks += [f"{folded[1]}_{task}" for task in range(low, high + 1)]
    return tasks


def assigned_nodes(node_list: str) -> str | None:
    """Slurm's node list, or None for a job without nodes (squeue prints nothing, sacct "None assigned")."""
    node_list = node_list.strip()
    return None if node_list in ("", "None assigned", "(null)") else node_list


def parse_time(text: str) -> datetime | None:
    """sacct's local time as an aware UTC datetime; None for "Unknown" (not started, or not ended yet)."""
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return None
