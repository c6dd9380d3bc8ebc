"""The scheduler through pyslurm, Slurm's C API from Python, where a pyslurm built for this cluster is installed.

pyslurm X.Y only builds against Slurm X.Y, so it is an optional import: this module imports, and the server
runs, without it. `pyslurm_usable` says whether it can be used here, and why not. The calls are those of
pyslurm's job API as of 23.2.2 (checked against 25.11's source), so Slurm 23.02 or newer.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from server.scheduler import EndedJob, Job, JobAccounting, JobStatus, SchedulerError, states, statuses_of
from server.scheduler.commands import Runner, ping_controller, run_command
from server.scheduler.naming import NO_ARRAYS, ArrayTasks, job_name, run_id_of
from server.scheduler.sacct import sacct_accounting

log = logging.getLogger(__name__)

IMPORT_CHECK_TIMEOUT_S = 30

# "slurm 22.05.8" (upstream), "slurm-wlm 22.05.8" (Debian): the first X.Y.Z after the name.
_SLURM_VERSION = re.compile(r"^\s*slurm\S*\s+(\d+)\.(\d+)\.\d+", re.IGNORECASE | re.MULTILINE)
# pyslurm numbers releases after Slurm's without the leading zero: 22.5.x is for Slurm 22.05, 25.11.2 for 25.11.
_PYSLURM_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.|$)")

Release = tuple[int, int]

# The first pyslurm whose job API (Jobs.load, JobSubmitDescription, db.JobFilter) is the one used here, and
# that finds a job in the accounting database by id whatever its age.
OLDEST_PYSLURM = (23, 2, 2)


def slurm_release(version_output: str) -> Release | None:
    """Slurm's (major, minor) from what `sinfo --version` prints; None if it is not such a line."""
    match = _SLURM_VERSION.search(version_output)
    return (int(match[1]), int(match[2])) if match else None


def pyslurm_release(version: str) -> Release | None:
    """The Slurm (major, minor) that a pyslurm version is built for; None if it is not such a version."""
    match = _PYSLURM_VERSION.match(version)
    return (int(match[1]), int(match[2])) if match else None


def unsupported_pyslurm(version: str) -> str | None:
    """Why this backend cannot use a pyslurm of that version, or None when its job API is the one used here."""
    numbers = tuple(int(part) for part in re.findall(r"\d+", version)[:3])
    if len(numbers) < 2:
        return f"cannot read the Slurm release of pyslurm {version!r}"
    if numbers < OLDEST_PYSLURM:
        oldest = ".".join(map(str, OLDEST_PYSLURM))
        return (
            f"pyslurm {version} predates the job API this backend uses (pyslurm {oldest} or newer, "
            f"so Slurm {OLDEST_PYSLURM[0]}.{OLDEST_PYSLURM[1]:02d} or newer): use the slurm backend"
        )
    return None


def _slurm_text(release: Release) -> str:
    return f"{release[0]}.{release[1]:02d}"


def _pyslurm_text(release: Release) -> str:
    return f"{release[0]}.{release[1]}"


def release_mismatch(pyslurm_version: str, slurm_version_output: str) -> str | None:
    """Why this pyslurm cannot drive this Slurm, or None when their releases match."""
    wanted = slurm_release(slurm_version_output)
    if wanted is None:
        return f"cannot read the cluster's Slurm release from {slurm_version_output.strip()!r}"
    built_for = pyslurm_release(pyslurm_version)
    if built_for is None:
        return f"cannot read the Slurm release of pyslurm {pyslurm_version!r}"
    if built_for != wanted:
        return (
            f"pyslurm {_pyslurm_text(built_for)} does not match Slurm {_slurm_text(wanted)} on this cluster: "
            f"build pyslurm {_pyslurm_text(wanted)} against this cluster's Slurm headers"
        )
    return None


def cluster_slurm_version(run: Runner = run_command) -> str:
    """What this host's Slurm commands say their version is, e.g. "slurm 22.05.8"; the library is theirs too."""
    result = run(["sinfo", "--version"])
    if result.returncode != 0:
        raise SchedulerError(f"sinfo --version failed: {result.stderr.strip()}")
    return result.stdout.strip()


def installed_pyslurm_version() -> str | None:
    """The version of the installed pyslurm distribution, read without importing it; None if there is none."""
    try:
        return importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        return None


def pyslurm_import_error(python: str = sys.executable) -> str | None:
    """Why `import pyslurm` fails in that interpreter, or None when it imports.

    A child process tries it: a pyslurm built against another libslurm can abort in C while it initialises,
    and its import also changes the process's dlopen flags for every extension loaded after it.
    """
    try:
        result = subprocess.run(
            [python, "-c", "import pyslurm"],
            capture_output=True,
            text=True,
            timeout=IMPORT_CHECK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"import pyslurm did not finish within {IMPORT_CHECK_TIMEOUT_S} s"
    if result.returncode == 0:
        return None
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"import pyslurm exited with status {result.returncode}"


def pyslurm_usable(run: Runner = run_command) -> tuple[bool, str]:
    """Whether pyslurm is installed in this Python, matches the cluster's Slurm release and imports; and why."""
    version = installed_pyslurm_version()
    if version is None:
        return False, f"pyslurm is not installed in this Python ({sys.executable})"
    try:
        slurm_version = cluster_slurm_version(run)
    except SchedulerError as err:
        return False, f"cannot tell the cluster's Slurm release: {err}"
    refusal = release_mismatch(version, slurm_version) or unsupported_pyslurm(version)
    if refusal is not None:
        return False, refusal
    error = pyslurm_import_error()
    if error is not None:
        return False, f"pyslurm {version} is installed but does not import: {error}"
    return True, f"pyslurm {version} matches {slurm_version} on this cluster"


def _load_pyslurm() -> ModuleType:
    try:
        return importlib.import_module("pyslurm")
    except ImportError as err:
        raise SchedulerError(f"pyslurm cannot be imported: {err}; see pyslurm_usable() for why") from None


def _exit_code(job: Any) -> str:
    # The same "code:signal" that sacct prints.
    return f"{int(job.exit_code)}:{int(job.exit_code_signal)}"


def _status(job: Any, source: str) -> JobStatus | None:
    raw_state = str(job.state)
    state = states.from_slurm(raw_state)
    if state is None:
        log.warning("job %s: unknown Slurm state %r from %s", job.id, raw_state, source)
        return None
    reason = str(job.state_reason or "")
    # A live job's exit code is still unset; pyslurm shows that as 0.
    exit_code = _exit_code(job) if state.is_final else None
    nodes = str(getattr(job, "nodes", None) or "") or None
    name = getattr(job, "name", None)
    submitted = getattr(job, "submit_time", None)  # seconds since the epoch, in both job APIs
    return JobStatus(
        state, raw_state, None if reason in ("None", "") else reason, exit_code, nodes,
        str(name) if name else None, datetime.fromtimestamp(submitted, UTC) if submitted else None,
    )  # fmt: skip


def _records(jobs: Iterable[Any], wanted: set[str], source: str) -> list[tuple[str, JobStatus]]:
    records: list[tuple[str, JobStatus]] = []
    for job in jobs:
        job_id = str(job.id)
        if job_id not in wanted:
            continue
        status = _status(job, source)
        if status is not None:
            records.append((job_id, status))
    return records


class PyslurmScheduler:
    """Submit, poll and cancel through pyslurm: one controller load and one accounting query per poll.

    Make one only where `pyslurm_usable()` said yes: importing a pyslurm that does not match the local
    libslurm may end the process from C, before Python can catch anything.
    """

    name = "pyslurm"
    # One at a time: the Slurm C API pyslurm wraps is not known to be safe across threads.
    submit_concurrency = 1
    runs_as_user = False  # jobs run as the service: the user is ignored
    uses_slurm = True

    def __init__(self) -> None:
        self._pyslurm = _load_pyslurm()
        # pyslurm reports refusals as RPCError and bad job descriptions as ValueError.
        self._errors: tuple[type[Exception], ...] = (self._pyslurm.RPCError, ValueError)

    def submit(self, script: Path, run_dir: Path, user: str | None = None) -> str:
        # As `sbatch --chdir=RUN_DIR SCRIPT`: the script's #SBATCH lines fill what is not set here, and the
        # job gets the submitter's environment. pyslurm's parser skips #SBATCH options it does not know.
        description = self._pyslurm.JobSubmitDescription(script=str(script), working_directory=str(run_dir))
        try:
            description.load_sbatch_options()
            job_id = description.submit()
        except self._errors as err:
            raise SchedulerError(f"Slurm refused the job: {err}") from None
        return str(int(job_id))

    def poll(self, jobs: Sequence[Job]) -> dict[Job, JobStatus]:
        # Slurm's job ids are numbers; any other id is not one of its jobs.
        asked = [job for job in jobs if job.job_id.isdigit()]
        if not asked:
            return {}
        try:
            live = self._pyslurm.Jobs.load()
        except self._errors as err:
            raise SchedulerError(f"slurmctld did not list its jobs: {err}") from None
        found = statuses_of(asked, _records(live.values(), {job.job_id for job in asked}, "slurmctld"))
        gone = [job for job in asked if job not in found]
        if gone:
            found.update(self._finished(gone))
        return found

    def _finished(self, jobs: list[Job]) -> dict[Job, JobStatus]:
        """Jobs that left slurmctld's memory, from the accounting database in one query. pyslurm's filter has no
        duplicates flag: slurmdbd answers the latest job of each id, which is left out where it is another job."""
        db = self._pyslurm.db
        ids = sorted({int(job.job_id) for job in jobs})
        try:
            found = db.Jobs.load(db.JobFilter(ids=ids))
        except self._errors as err:
            raise SchedulerError(f"Slurm's accounting database did not answer: {err}") from None
        return statuses_of(jobs, _records(found.values(), {str(job_id) for job_id in ids}, "slurmdbd"))

    def jobs_of(self, run_ids: Sequence[str], arrays: ArrayTasks = NO_ARRAYS) -> dict[str, str]:
        # `arrays` is left alone: this backend submits one job per run, none as a task of an array.
        if not run_ids:
            return {}
        db = self._pyslurm.db
        try:
            past = db.Jobs.load(db.JobFilter(names=[job_name(run_id) for run_id in run_ids]))
            live = self._pyslurm.Jobs.load()
        except self._errors as err:
            raise SchedulerError(f"Slurm did not list its jobs: {err}") from None
        wanted = set(run_ids)
        found: dict[str, str] = {}
        for job in [*past.values(), *live.values()]:  # the queue's answer comes last and wins
            run_id = run_id_of(getattr(job, "name", None))
            if run_id in wanted:
                found[run_id] = str(job.id)
        return found

    def accounting(self, jobs: Sequence[EndedJob]) -> dict[str, JobAccounting]:
        # sacct, as the slurm backend asks it (Slurm's commands are installed wherever pyslurm is usable): one
        # reading of the accounting, rather than a second one through pyslurm's records that no test here can run.
        return sacct_accounting(jobs, run_command)

    def ping(self) -> None:
        # pyslurm is used only where Slurm's own commands are installed too (pyslurm_usable runs them).
        ping_controller()

    def signal(self, job_id: str, signal_name: str, user: str | None = None) -> None:
        if not job_id.isdigit():
            raise SchedulerError(f"{job_id!r} is not a Slurm job id")
        try:
            # The tasks of every step (steps="children"), not the batch script's shell, as scancel --signal does.
            self._pyslurm.Job(int(job_id)).send_signal(f"SIG{signal_name}", steps="children")
        except self._errors as err:
            raise SchedulerError(f"signalling job {job_id} failed: {err}") from None

    def cancel(self, job_id: str, user: str | None = None) -> None:
        if not job_id.isdigit():
            raise SchedulerError(f"{job_id!r} is not a Slurm job id")
        try:
            self._pyslurm.Job(int(job_id)).cancel()
        except self._errors as err:
            raise SchedulerError(f"cancelling job {job_id} failed: {err}") from None
