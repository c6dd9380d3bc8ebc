"""The scheduler through Slurm's own commands: sbatch, squeue, sacct, scancel."""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import product
from pathlib import Path
from typing import TypeVar

from server.render import job_name
from server.scheduler import (
    EndedJob,
    Job,
    JobAccounting,
    JobStatus,
    SchedulerError,
    SchedulerUnavailable,
    states,
    statuses_of,
)

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


def _failure(command: str, result: subprocess.CompletedProcess[str]) -> SchedulerError:
    said = result.stderr.strip() or result.stdout.strip()
    if any(marker in said for marker in _UNREACHABLE):
        return SchedulerUnavailable(f"Slurm cannot be reached ({command}: {said}); try again when it is back")
    return SchedulerError(f"{command} failed: {said}")


def ping_controller(run: Runner = run_command) -> None:
    """`scontrol ping`: one small RPC to each slurmctld, exit 0 when the primary (or a backup) answers."""
    result = run(["scontrol", "ping"])
    if result.returncode != 0:
        said = _first_line(result.stdout) or _first_line(result.stderr) or f"exit {result.returncode}"
        raise SchedulerUnavailable(f"scontrol ping: {said}")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


class SlurmScheduler:
    name = "slurm"
    # Measured here: 100 sbatch calls took 0.64 s one by one, 0.30 s two at a time, 0.27 s four at a time.
    submit_concurrency = 4
    runs_as_user = False  # jobs run as the service: the user is ignored

    def __init__(self, run: Runner = run_command) -> None:
        # The runner is the subprocess boundary; tests replace it only to inject failures Slurm cannot make.
        self._run = run

    def submit(self, script: Path, run_dir: Path, user: str | None = None) -> str:
        result = self._run(["sbatch", "--parsable", f"--chdir={run_dir}", str(script)])
        if result.returncode != 0:
            failure = _failure("sbatch", result)
            if isinstance(failure, SchedulerUnavailable):
                raise failure
            raise SchedulerError(f"sbatch refused the job: {result.stderr.strip() or result.stdout.strip()}")
        # --parsable prints "jobid" or "jobid;cluster".
        job_id = _first_line(result.stdout).split(";")[0]
        if not job_id.isdigit():
            raise SchedulerError(f"sbatch printed no job id: {result.stdout.strip()!r}")
        return job_id

    def poll(self, jobs: Sequence[Job]) -> dict[Job, JobStatus]:
        if not jobs:
            return {}
        queued = statuses_of(jobs, self._squeue(_ids(jobs)))
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
            ["squeue", "--noheader", "--states=all", "--me", f"--jobs={','.join(job_ids)}",
             "--format=%i|%T|%r|%N|%V|%j"]
        )  # fmt: skip
        if result.returncode != 0:
            # squeue exits 1 when it is asked about a single id it no longer knows: that job left the queue.
            if "Invalid job id" in result.stderr:
                return []
            raise _failure("squeue", result)
        return _statuses(result.stdout, "squeue", with_exit_code=False)

    def ping(self) -> None:
        ping_controller(self._run)

    def cancel(self, job_id: str, user: str | None = None) -> None:
        result = self._run(["scancel", job_id])
        if result.returncode != 0:
            raise _failure(f"scancel {job_id}", result)

    def jobs_of(self, run_ids: Sequence[str]) -> dict[str, str]:
        if not run_ids:
            return {}
        names = ",".join(job_name(run_id) for run_id in run_ids)
        queued = self._run(["squeue", "--noheader", f"--name={names}", "--format=%j|%i"])
        if queued.returncode != 0:
            raise _failure("squeue", queued)
        found = ended_jobs_named(run_ids, self._run)
        for line in queued.stdout.splitlines():
            name, _, job_id = line.strip().partition("|")
            run_id = name.removeprefix(job_name(""))
            if run_id in run_ids and job_id.isdigit():
                found[run_id] = job_id  # the queue's answer comes last and wins
        return found

    def accounting(self, jobs: Sequence[EndedJob]) -> dict[str, JobAccounting]:
        return sacct_accounting(jobs, self._run)


def sacct_statuses(jobs: Sequence[Job], run: Runner) -> dict[Job, JobStatus]:
    """The statuses the accounting database has of the given jobs, in one sacct: how every backend learns the end
    of a job that has left the controller. With --duplicates: without it, sacct answers only the latest job of an
    id, which after a controller's state was wiped is another job than an older run's."""
    result = run(
        ["sacct", "--noheader", "--parsable2", "--allocations", "--duplicates", f"--jobs={','.join(_ids(jobs))}",
         "--format=JobIDRaw,State,Reason,ExitCode,NodeList,Submit,JobName"]
    )  # fmt: skip
    if result.returncode != 0:
        raise _failure("sacct", result)
    return statuses_of(jobs, _statuses(result.stdout, "sacct", with_exit_code=True))


def _ids(jobs: Sequence[Job]) -> list[str]:
    """The jobs' ids, each once, in order (two runs may hold the same id when one of them is from before a wipe)."""
    return list(dict.fromkeys(job.job_id for job in jobs))


def ended_jobs_named(run_ids: Sequence[str], run: Runner, *, all_users: bool = False) -> dict[str, str]:
    """The job ids, by run id, of the given runs' jobs in the accounting database (named `scalelab-<run id>`), of
    the last week (which covers any server outage); `all_users`: everyone's jobs, not only the caller's."""
    names = ",".join(job_name(run_id) for run_id in run_ids)
    past = run(
        ["sacct", *(["--allusers"] if all_users else []), "--noheader", "--parsable2", "--allocations",
         "--starttime=now-7days", f"--name={names}", "--format=JobName,JobIDRaw"]
    )  # fmt: skip
    if past.returncode != 0:
        raise _failure("sacct", past)
    found: dict[str, str] = {}
    for line in past.stdout.splitlines():
        name, _, job_id = line.strip().partition("|")
        run_id = name.removeprefix(job_name(""))
        if run_id in run_ids and job_id.isdigit():
            found[run_id] = job_id
    return found


def _statuses(output: str, source: str, *, with_exit_code: bool) -> list[tuple[str, JobStatus]]:
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
        nodes = _nodes(rest[0]) if rest else None
        submitted = _time(rest[1]) if len(rest) > 1 else None
        name = "|".join(rest[2:]) if len(rest) > 2 else None
        said = None if reason in ("None", "") else reason
        statuses.append((job_id, JobStatus(state, raw_state, said, exit_code, nodes, name, submitted)))
    return statuses


def _nodes(node_list: str) -> str | None:
    """Slurm's node list, or None for a job without nodes (squeue prints nothing, sacct "None assigned")."""
    node_list = node_list.strip()
    return None if node_list in ("", "None assigned", "(null)") else node_list


# ---- node lists ------------------------------------------------------------------------------------------------

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_nodelist(node_list: str) -> list[str]:
    """Slurm's compressed node list as host names, in order: "n[1-3,5],m2" is n1 n2 n3 n5 m2, "n[08-10]" keeps
    the width (n08 n09 n10), and several brackets in a name multiply ("r[1-2]n[1-2]"), as `scontrol show
    hostnames` does, without a command per list."""
    names: list[str] = []
    for item in _top_level_split(_nodes(node_list) or ""):
        parts = re.split(r"\[([^\]]*)\]", item)  # text, bracket, text, bracket, ..., text
        choices = [[text] if index % 2 == 0 else _bracket(text, node_list) for index, text in enumerate(parts)]
        names += ["".join(combination) for combination in product(*choices)]
    return names


def _top_level_split(node_list: str) -> list[str]:
    """Split at the commas outside brackets."""
    items, depth, current = [], 0, ""
    for char in node_list:
        if char == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth not in (0, 1):
            raise ValueError(f"unbalanced brackets in node list {node_list!r}")
        current += char
    if depth:
        raise ValueError(f"unbalanced brackets in node list {node_list!r}")
    return [item for item in [*items, current] if item]


def _bracket(ranges: str, node_list: str) -> list[str]:
    values: list[str] = []
    for part in ranges.split(","):
        match = _RANGE.match(part.strip())
        if match is None:
            raise ValueError(f"cannot read range {part!r} in node list {node_list!r}")
        first, last = match[1], match[2] or match[1]
        width = len(first) if first.startswith("0") else 0
        values += [str(number).zfill(width) for number in range(int(first), int(last) + 1)]
    return values


# ---- accounting ------------------------------------------------------------------------------------------------

# The fields asked of sacct; without --allocations, so the steps' rows give what only steps measure (MaxRSS and
# TRES usage), and with --noconvert, so sizes come in bytes. The job's name last: a "|" in it stays in it.
ACCOUNTING_FIELDS = (
    "JobIDRaw", "NodeList", "Start", "End", "ElapsedRaw", "TotalCPU", "AllocCPUS", "MaxRSS", "TRESUsageInTot",
    "ConsumedEnergyRaw", "JobName",
)  # fmt: skip
# The server's and slurmdbd's clocks may differ, and sacct's times are whole seconds: a margin on each side of
# the window asked for (the overlaps are decided on Slurm's own times, so a wider window only adds rows).
WINDOW_MARGIN = timedelta(minutes=1)
_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}


def accounting_command(jobs: Sequence[EndedJob]) -> list[str]:
    """The one sacct asking for every job that ran on the ended jobs' nodes during their windows: theirs and
    any other's."""
    start = min(job.start for job in jobs) - WINDOW_MARGIN
    end = max(job.end for job in jobs) + WINDOW_MARGIN
    nodes = sorted({name for job in jobs for name in expand_nodelist(job.nodes)})
    return [
        "sacct", "--allusers", "--noheader", "--parsable2", "--noconvert", f"--nodelist={','.join(nodes)}",
        # With --state, the window selects the jobs that were RUNNING at some time within it: the overlaps.
        "--state=RUNNING", f"--starttime={_slurm_time(start)}", f"--endtime={_slurm_time(end)}",
        f"--format={','.join(ACCOUNTING_FIELDS)}",
    ]  # fmt: skip


def sacct_accounting(jobs: Sequence[EndedJob], run: Runner) -> dict[str, JobAccounting]:
    """Each ended job's accounting and the other jobs that shared its nodes, from one sacct call."""
    if not jobs:
        return {}
    result = run(accounting_command(jobs))
    if result.returncode != 0:
        raise _failure("sacct", result)
    rows = _accounting_rows(result.stdout)
    found: dict[str, JobAccounting] = {}
    for job in jobs:
        own = next((row for row in reversed(rows) if row.job_id == job.job_id and job.name in (None, row.name)), None)
        if own is None or own.start is None:
            continue  # not (yet) in the accounting database as a job that ran: asked again next cycle
        found[job.job_id] = own.accounting(_shared_with(own, own.start, rows))
    return found


@dataclass
class _JobRows:
    """One job's allocation row and what its steps' rows add."""

    job_id: str
    name: str
    nodes: set[str]
    node_list: str
    start: datetime | None
    end: datetime | None
    elapsed_s: int
    alloc_cpus: int
    total_cpu_s: float
    max_rss_bytes: int | None = None
    gpu_util: float | None = None
    gpu_mem_bytes: int | None = None
    energy_j: int | None = None

    def add(self, fields: dict[str, str]) -> None:
        """Take a row's (the allocation's or a step's) measured figures in: the largest of each."""
        usage = _tres(fields["TRESUsageInTot"])
        self.max_rss_bytes = _largest(self.max_rss_bytes, _size(fields["MaxRSS"]))
        self.gpu_util = _largest(self.gpu_util, _number(usage.get("gres/gpuutil", "")))
        self.gpu_mem_bytes = _largest(self.gpu_mem_bytes, _size(usage.get("gres/gpumem", "")))
        # Slurm prints 0 (or nothing) where no energy plugin gathers it: a job that ran used more than 0 J.
        energy = _size(fields["ConsumedEnergyRaw"])
        self.energy_j = _largest(self.energy_j, energy or None)

    def accounting(self, shared_with: list[str]) -> JobAccounting:
        return JobAccounting(
            nodes=self.node_list, start=self.start, end=self.end, elapsed_s=self.elapsed_s,
            alloc_cpus=self.alloc_cpus, total_cpu_s=self.total_cpu_s, max_rss_bytes=self.max_rss_bytes,
            gpu_util=self.gpu_util, gpu_mem_bytes=self.gpu_mem_bytes, energy_j=self.energy_j,
            shared_with=tuple(shared_with),
        )  # fmt: skip


def _accounting_rows(output: str) -> list[_JobRows]:
    """sacct's rows by job: "123" is the allocation, "123.batch", "123.0" ... its steps (which follow it). Two
    allocations may have one id (a controller's state wiped meanwhile): each keeps the steps that follow it."""
    jobs: list[_JobRows] = []
    latest: dict[str, _JobRows] = {}
    for line in output.splitlines():
        values = line.rstrip("\n").split("|")
        if len(values) < len(ACCOUNTING_FIELDS):
            continue
        named = [*values[: len(ACCOUNTING_FIELDS) - 1], "|".join(values[len(ACCOUNTING_FIELDS) - 1 :])]
        fields = dict(zip(ACCOUNTING_FIELDS, named, strict=True))
        job_id, _, step = fields["JobIDRaw"].partition(".")
        if not step:
            node_list = _nodes(fields["NodeList"]) or ""
            latest[job_id] = _JobRows(
                job_id=job_id, name=fields["JobName"], nodes=set(expand_nodelist(node_list)), node_list=node_list,
                start=_time(fields["Start"]), end=_time(fields["End"]),
                elapsed_s=int(_number(fields["ElapsedRaw"]) or 0), alloc_cpus=int(_number(fields["AllocCPUS"]) or 0),
                total_cpu_s=_duration(fields["TotalCPU"]),
            )  # fmt: skip
            jobs.append(latest[job_id])
        if job_id in latest:
            latest[job_id].add(fields)
    return jobs


def _shared_with(own: _JobRows, start: datetime, others: Iterable[_JobRows]) -> list[str]:
    """The other jobs that ran on one of its nodes while it ran, from `start` ([start, end) intervals: back to
    back is not sharing); a job still running has no end yet."""
    shared = []
    own_end = _end(start, own.end)
    for other in others:
        if other is own or other.start is None or not (own.nodes & other.nodes):
            continue
        if _before(other.start, own_end) and _before(start, _end(other.start, other.end)):
            shared.append(other.job_id)
    return sorted(shared, key=lambda job_id: (len(job_id), job_id))


def _end(start: datetime, end: datetime | None) -> datetime | None:
    """Slurm's times are whole seconds: a job that started and ended within one lasted up to a second, and two
    such jobs in the same second on one node may have overlapped."""
    return None if end is None else max(end, start + timedelta(seconds=1))


def _before(moment: datetime, end: datetime | None) -> bool:
    """Before the end of a job; any time is before the end of a job that has not ended."""
    return end is None or moment < end


def _slurm_time(moment: datetime) -> str:
    """A time as sacct reads it: the local time of this host, which is Slurm's."""
    return moment.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def _time(text: str) -> datetime | None:
    """sacct's local time as an aware UTC datetime; None for "Unknown" (not started, or not ended yet)."""
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return None


def _duration(text: str) -> float:
    """Slurm's [D-][HH:]MM:SS[.mmm] as seconds."""
    days, _, clock = text.strip().rpartition("-")
    seconds = 0.0
    for part in clock.split(":"):
        seconds = seconds * 60 + float(part or 0)
    return seconds + int(days or 0) * 86400


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _size(text: str) -> int | None:
    """Bytes from "63823872" (--noconvert) or "62328K"; None where sacct printed nothing."""
    text = text.strip()
    unit = text[-1:].upper() if text[-1:].isalpha() else ""
    value = _number(text.removesuffix(text[-1:]) if unit else text)
    if value is None or unit not in _SIZE_UNITS:
        return None
    return int(value * _SIZE_UNITS[unit])


def _tres(text: str) -> dict[str, str]:
    """ "cpu=00:00:02,mem=63823872,gres/gpuutil=87" as a dict."""
    pairs = (item.partition("=") for item in text.split(",") if "=" in item)
    return {name: value for name, _, value in pairs}


_Figure = TypeVar("_Figure", int, float)


def _largest(current: _Figure | None, new: _Figure | None) -> _Figure | None:
    if new is None:
        return current
    return new if current is None else max(current, new)
