"""Slurm's accounting database through sacct, which every Slurm backend reads: the statuses of jobs that left the
controller, job ids by their jobs' names, and what ended jobs used and which other jobs shared their
nodes; and Slurm's compressed node lists."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import product
from typing import TypeVar

from server.scheduler import EndedJob, Job, JobAccounting, JobStatus, statuses_of
from server.scheduler.commands import Runner, assigned_nodes, failure, job_ids, jobs_by_name, parse_time, status_rows
from server.scheduler.naming import is_array_task


def sacct_statuses(jobs: Sequence[Job], run: Runner) -> dict[Job, JobStatus]:
    """The statuses the accounting database has of the given jobs, in one sacct: how every backend learns the end
    of a job that has left the controller. With --duplicates: without it, sacct answers only the latest job of an
    id, which after a controller's state was wiped is another job than an older run's. JobID, not JobIDRaw: an
    array task's is `<array job>_<task>`, the id its run holds (its raw id is a number of its own)."""
    asked = job_ids(jobs)
    # An array's tasks that never started have no record of their own: the array's id gives them, folded
    # ("123_[2-15]", which status_rows unfolds).
    arrays = sorted({job_id.split("_", 1)[0] for job_id in asked if is_array_task(job_id)})
    result = run(
        ["sacct", "--noheader", "--parsable2", "--allocations", "--duplicates", f"--jobs={','.join(asked + arrays)}",
         "--format=JobID,State,Reason,ExitCode,NodeList,Submit,JobName"]
    )  # fmt: skip
    if result.returncode != 0:
        raise failure("sacct", result)
    return statuses_of(jobs, status_rows(result.stdout, "sacct", with_exit_code=True))


def ended_jobs_named(names: Sequence[str], run: Runner, *, all_users: bool = False) -> dict[str, str]:
    """The job ids, by job name, of the jobs with the given names in the accounting database, of the last week
    (which covers any server outage); an array's id for an array's name (JobID, not JobIDRaw: a task's raw id is a
    number of its own). `all_users`: everyone's jobs, not only the caller's."""
    past = run(
        ["sacct", *(["--allusers"] if all_users else []), "--noheader", "--parsable2", "--allocations",
         "--starttime=now-7days", f"--name={','.join(names)}", "--format=JobName,JobID"]
    )  # fmt: skip
    if past.returncode != 0:
        raise failure("sacct", past)
    return jobs_by_name(past.stdout, set(names))


# ---- node lists ------------------------------------------------------------------------------------------------

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_nodelist(node_list: str) -> list[str]:
    """Slurm's compressed node list as host names, in order: "n[1-3,5],m2" is n1 n2 n3 n5 m2, "n[08-10]" keeps
    the width (n08 n09 n10), and several brackets in a name multiply ("r[1-2]n[1-2]"), as `scontrol show
    hostnames` does, without a command per list."""
    names: list[str] = []
    for item in _top_level_split(assigned_nodes(node_list) or ""):
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
    "JobID", "NodeList", "Start", "End", "ElapsedRaw", "TotalCPU", "AllocCPUS", "MaxRSS", "TRESUsageInTot",
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
        raise failure("sacct", result)
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
        job_id, _, step = fields["JobID"].partition(".")
        if not step:
            node_list = assigned_nodes(fields["NodeList"]) or ""
            latest[job_id] = _JobRows(
                job_id=job_id, name=fields["JobName"], nodes=set(expand_nodelist(node_list)), node_list=node_list,
                start=parse_time(fields["Start"]), end=parse_time(fields["End"]),
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
