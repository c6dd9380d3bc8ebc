"""The monitor's cost on the real Slurm, counted by Slurm itself: one squeue, at most one sacct per cycle."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from contract.states import RunState
from server.models import Run
from server.monitor import Monitor
from server.scheduler import Scheduler
from server.scheduler.commands import Runner, run_command
from server.scheduler.naming import job_name
from server.scheduler.slurm import SlurmScheduler
from server.scheduler.slurmrestd import SlurmrestdScheduler
from server.scheduler.tokens import Tokens
from tests.factories import experiment_row, run_row

pytestmark = pytest.mark.slurm

log = logging.getLogger(__name__)

# The identity the monitor's Slurm commands run under here, so that Slurm counts its calls apart from everyone's.
MONITOR_USER = "scalelab-poll"
# Runs of this test on one machine share that user; they take turns.
LOCK_FILE = Path(tempfile.gettempdir()) / "scalelab-polling-cost.lock"
LIVE_JOBS = 30
LEFT_QUEUE = 10
# Cycles per phase: at least MIN_CYCLES, more while others' calls still blur which RPCs are the monitor's.
MIN_CYCLES = 5
MAX_CYCLES = 60
# What one squeue for several job ids costs slurmctld (Slurm 22.05): the service user's jobs in one RPC (--me: the
# controller leaves other users' jobs out), the partition table that squeue reads for its own filtering, and the
# federation's description (empty here) that squeue asks for whenever it filters by user. None grows with the number
# of ids asked about, nor with other users' jobs.
SQUEUE_RPCS = Counter({"REQUEST_JOB_USER_INFO": 1, "REQUEST_PARTITION_INFO": 1, "REQUEST_FED_INFO": 1})
# What one GET of slurmrestd's /slurm/VERSION/jobs costs slurmctld: the job table in one RPC, nothing else (22.05's
# v0.0.38 and 24.11's v0.0.42 alike; reading the API version from /openapi/v3 costs slurmctld nothing).
RESTD_JOBS_RPCS = Counter({"REQUEST_JOB_INFO": 1})
# Above Slurm's largest job id (MaxJobId, 67043328 by default): never a job's.
FORGOTTEN_JOB_IDS = 67_100_000
# The host's slurmrestd (22.05), or the one test_slurmrestd.py is pointed at.
RESTD_SOCKET = Path(os.environ.get("SCALELAB_TEST_SLURMRESTD_SOCKET") or "/run/scalelab-slurmrestd/slurmrestd.socket")
# What one sacct costs slurmdbd: open a connection, one job query, close it.
SACCT_RPCS = Counter({"SLURM_PERSIST_INIT": 1, "DBD_GET_JOBS_COND": 1, "DBD_FINI": 1})
# Each daemon counts an RPC after it has answered it: give the last one of a cycle time to be counted.
SETTLE_S = 0.1

# Held, so it costs nothing while it waits; should anyone release it, it ends at once. (A --deadline would not
# clean up after a killed run: slurmctld 22.05 leaves held jobs pending past it.) Named after its run, as scalelab
# names a run's job: the monitor takes a job's record for a run only where the names agree.
HELD_JOB = """#!/bin/sh
#SBATCH --job-name={name}
#SBATCH --hold
#SBATCH --time=1
#SBATCH --output=/dev/null
true
"""


# ---- Slurm's RPC counters ------------------------------------------------------------------------------------------

_SINCE = re.compile(r"^Data since\s.*\((\d+)\)\s*$")
_SECTION = re.compile(r"^Remote Procedure Call statistics by (message type|user)")
_ROW = re.compile(r"^\s+(\S+)\s+\(\s*(\d+)\)\s+count:(\d+)")


@dataclass(frozen=True)
class RpcStats:
    since: int  # when the counters were last reset
    by_type: Counter[str]
    by_uid: Counter[int]


@dataclass(frozen=True)
class RpcDelta:
    by_type: Counter[str]
    by_uid: Counter[int]


def parse_rpc_stats(text: str) -> RpcStats:
    """The RPC tables of `sdiag` or `sacctmgr show stats`: `\\tNAME ( number) count:N ...` rows under their header."""
    since: int | None = None
    section: str | None = None
    by_type: Counter[str] = Counter()
    by_uid: Counter[int] = Counter()
    for line in text.splitlines():
        if match := _SINCE.match(line):
            since = int(match[1])
        elif match := _SECTION.match(line):
            section = match[1]
        elif match := _ROW.match(line):
            if section == "message type":
                by_type[match[1]] += int(match[3])
            elif section == "user":
                by_uid[int(match[2])] += int(match[3])
        elif line.strip() and not line[0].isspace():
            section = None  # the next block ("Pending RPC statistics", ...) has rows of the same shape
    assert since is not None and by_type and by_uid, f"no RPC statistics in:\n{text}"
    return RpcStats(since, by_type, by_uid)


def read_stats(argv: Sequence[str]) -> RpcStats:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    return parse_rpc_stats(result.stdout)


def slurmctld_stats() -> RpcStats:
    return read_stats(["sdiag"])


def slurmdbd_stats() -> RpcStats:
    return read_stats(["sacctmgr", "show", "stats"])


def delta(before: RpcStats, after: RpcStats) -> RpcDelta | None:
    """What was counted between two reads; None if the counters were reset meanwhile (sdiag --reset, a restart)."""
    if before.since != after.since:
        return None
    by_type = Counter({name: after.by_type[name] - before.by_type[name] for name in after.by_type})
    by_uid = Counter({uid: after.by_uid[uid] - before.by_uid[uid] for uid in after.by_uid})
    if any(count < 0 for count in (*by_type.values(), *by_uid.values())):
        return None
    return RpcDelta(+by_type, +by_uid)


@dataclass(frozen=True)
class Window:
    slurmctld: RpcDelta | None
    slurmdbd: RpcDelta | None


def measure(action: Callable[[], None]) -> Window:
    # Each daemon's window is kept as short as it can be: fewer of other people's RPCs fall into it.
    dbd = slurmdbd_stats()
    ctld = slurmctld_stats()
    action()
    time.sleep(SETTLE_S)
    window = Window(delta(ctld, slurmctld_stats()), delta(dbd, slurmdbd_stats()))
    log.info("counted: %s", window)
    return window


def fewest(a: RpcDelta | None, b: RpcDelta) -> RpcDelta:
    return b if a is None else RpcDelta(a.by_type & b.by_type, a.by_uid & b.by_uid)


def reader_footprint() -> tuple[RpcDelta, RpcDelta]:
    """What reading the counters adds to them: the fewest RPCs of each type and user between two reads in a row.

    Back to back, the reads leave others little time to call in between, and what others call only ever adds:
    the fewest seen are the reads' own once types and users account for the same number of RPCs.
    """
    found: list[RpcDelta] = []
    for read in (slurmctld_stats, slurmdbd_stats):
        seen: RpcDelta | None = None
        for attempt in range(30):
            counts = delta(read(), read())
            if counts is not None:
                seen = fewest(seen, counts)
            if attempt >= 4 and seen is not None and seen.by_type.total() == seen.by_uid.total():
                break
        else:
            pytest.fail(f"{read.__name__}: the reads' own RPCs could not be told from others' in 30 tries: {seen}")
        found.append(seen)
    log.info("reading the counters costs: %s", found)
    return found[0], found[1]


class MonitorTypes:
    """Which RPCs one cycle of the monitor makes, bounded from above by every window seen.

    In each window the monitor made at most as many RPCs of a type as the window counted beyond the reads' own.
    Taking every cycle to make the same calls (its per-user count, checked in every window, is the same), the
    fewest of each type over all windows bounds them too. Once those bounds add up to the monitor's own per-user
    count, nothing is left for them to hide: they are its RPCs, exactly.
    """

    def __init__(self, reads: RpcDelta) -> None:
        self.reads = reads.by_type
        self.bound: Counter[str] | None = None

    def add(self, counts: RpcDelta) -> None:
        beyond = Counter(counts.by_type)
        beyond.subtract(self.reads)
        if any(n < 0 for n in beyond.values()):
            return  # a read of the counters was not counted yet: this window bounds nothing
        self.bound = +beyond if self.bound is None else self.bound & beyond

    def exact(self, per_cycle: int) -> Counter[str] | None:
        return self.bound if self.bound is not None and self.bound.total() == per_cycle else None


# ---- the monitor's own identity ------------------------------------------------------------------------------------


@contextlib.contextmanager
def measurement_lock(timeout_s: float = 600) -> Iterator[None]:
    with LOCK_FILE.open("a") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another run of this test held {LOCK_FILE} for {timeout_s:.0f} s")
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_system_user(name: str) -> int:
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name).pw_uid
    result = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return pwd.getpwnam(name).pw_uid  # or another run made it meanwhile
    except KeyError:
        pytest.fail(f"cannot create the system user {name}: {result.stderr.strip()}")


def as_user(name: str) -> Runner:
    """The scheduler's own command runner, under another uid: the same commands, counted apart by Slurm."""

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return run_command(["runuser", "-u", name, "--", *argv])

    return run


def cancel_leftovers() -> None:
    """Cancel the held jobs of an earlier run that was killed before it could: under the lock, none are in use (only
    this test submits as its user)."""
    listed = subprocess.run(
        ["squeue", "--noheader", f"--user={MONITOR_USER}", "--format=%i"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    if job_ids := listed.stdout.split():
        subprocess.run(["scancel", *job_ids], timeout=30, check=True)


@pytest.fixture
def monitor_uid(slurm: None) -> Iterator[int]:
    if os.geteuid() != 0:
        pytest.skip("running the monitor's commands as a user of their own needs root")
    with measurement_lock():
        uid = ensure_system_user(MONITOR_USER)
        cancel_leftovers()
        yield uid


@pytest.fixture
def job_dir() -> Iterator[Path]:
    """Run directories the monitor's user can read: it submits from here."""
    path = Path(tempfile.mkdtemp(prefix="scalelab-pollcost-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def held_job(job_dir: Path, run_id: str) -> Path:
    """The held job script of a run, readable by the monitor's user, who submits it."""
    path = job_dir / f"{run_id}.sbatch"
    path.write_text(HELD_JOB.format(name=job_name(run_id)))
    path.chmod(0o644)
    return path


def cancel_and_wait_for_accounting(job_ids: Sequence[str], timeout_s: float = 30) -> None:
    """Cancel the jobs and wait until slurmdbd has their end, so no message about them lands inside a window."""
    subprocess.run(["scancel", *job_ids], check=True, timeout=30)
    deadline = time.monotonic() + timeout_s
    while True:
        out = subprocess.run(
            ["sacct", "-n", "-P", "-X", f"--jobs={','.join(job_ids)}", "--format=JobIDRaw,State"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        if sum(line.split("|")[1].startswith("CANCELLED") for line in out.splitlines()) == len(job_ids):
            return
        assert time.monotonic() < deadline, f"slurmdbd did not record the cancellation of {job_ids}:\n{out}"
        time.sleep(0.2)


def assert_one_cycle_made(counts: RpcDelta, uid: int, expected: Counter[str], daemon: str) -> None:
    made = counts.by_uid[uid]
    assert made == expected.total(), (
        f"one cycle of the monitor made {made} RPCs to {daemon}, not {expected.total()} {dict(expected)}; "
        f"all RPCs counted meanwhile: {dict(counts.by_type)}"
    )


def runs_by_job(engine: Engine) -> dict[str, Run]:
    with Session(engine) as session:
        return {run.job_id or "": run for run in session.exec(select(Run)).all()}


def back_to_pending(engine: Engine, job_ids: Sequence[str]) -> None:
    """As if these jobs had ended while the monitor was away: live in the database, gone from the queue."""
    with Session(engine) as session:
        for run in session.exec(select(Run).where(col(Run.job_id).in_(job_ids))).all():
            run.state, run.ended_at, run.exit_code = RunState.pending, None, None
            session.add(run)
        session.commit()


# ---- the test ------------------------------------------------------------------------------------------------------


def polling_scheduler(backend: str) -> tuple[Scheduler, Counter[str]]:
    """The scheduler the monitor polls with, as MONITOR_USER, and what one poll of queued jobs costs slurmctld."""
    if backend == "slurm":
        return SlurmScheduler(run=as_user(MONITOR_USER)), SQUEUE_RPCS
    if not RESTD_SOCKET.is_socket():
        pytest.skip(f"slurmrestd is not listening on {RESTD_SOCKET}: run scripts/slurm-local up")
    # Its own token comes from `scontrol token` run as MONITOR_USER, so slurmctld counts the REST calls as its.
    tokens = Tokens(["/nonexistent/no-user-tokens-here"], 600, run=as_user(MONITOR_USER))
    scheduler = SlurmrestdScheduler(
        f"unix:{RESTD_SOCKET}", tokens, service_user=MONITOR_USER, run=as_user(MONITOR_USER)
    )
    tokens.service_token()  # minted (an RPC of its own) before anything is counted, then cached
    log.info("slurmrestd API %s", scheduler.version)  # read once, before anything is counted
    return scheduler, RESTD_JOBS_RPCS


@pytest.mark.parametrize("backend", ["slurm", "slurmrestd"])
def test_one_squeue_and_at_most_one_sacct_per_cycle(engine, session, monitor_uid, job_dir, backend):
    """Thirty live runs on real held jobs cost slurmctld one job-table RPC per cycle, and slurmdbd one query or none.

    Isolating the monitor's counts on a cluster that others use at the same time:

    - Its Slurm commands run as a system user of their own (MONITOR_USER, made if missing), through the
      scheduler's runner: the very commands SlurmScheduler builds, prefixed with `runuser`. slurmctld (sdiag)
      and slurmdbd (`sacctmgr show stats`) both count RPCs per user, so that user's count is the monitor's
      alone, and every cycle is checked against it exactly. Runs of this test take turns on a lock file, as
      they share the user.
    - The per-user counts do not say which RPCs; the per-type counts are everyone's. Which RPCs a cycle makes
      is bounded from above by the fewest of each type in any window (MonitorTypes), beyond what reading the
      counters costs (measured first from reads in a row); cycles go on until those bounds add up to the per-user
      count, which makes them exact. A window in which nobody else called gives that at once; a busy cluster
      needs more windows, as long as each type is absent from others' calls in some window.
    - No `sdiag --reset`: it is global, would spoil any other measurement in progress, and isolates nothing.
      Counters are differenced instead; a window in which "Data since" moved (someone's reset, the midnight
      reset, a daemon restart) is dropped.

    The slurmrestd backend is held to the same: one GET of the controller's jobs per cycle with the service's
    own token (MONITOR_USER's, so slurmctld counts it under that uid as well), and for the jobs that left the
    controller the same one sacct.

    The jobs are submitted held through SlurmScheduler.submit, so they wait and load nothing. In the second
    phase a third of them are cancelled: they have left the queue while the rest still wait in it.
    About 15 s, also with other suites loading the cluster; up to about a minute more while others' calls keep
    blurring which RPCs are the monitor's.
    """
    submitter = SlurmScheduler(run=as_user(MONITOR_USER))
    scheduler, poll_rpcs = polling_scheduler(backend)
    job_ids: list[str] = []
    try:
        experiment = experiment_row(session)
        for position in range(LIVE_JOBS):
            run_dir = job_dir / f"run-{position}"
            run = run_row(session, experiment, run_dir, position=position, scheduler=scheduler.name)
            run.job_id = submitter.submit(held_job(job_dir, run.id), run_dir)
            job_ids.append(run.job_id)
            session.add(run)
            session.commit()
        monitor = Monitor(engine, scheduler, interval_s=0)
        ctld_reads, dbd_reads = reader_footprint()

        # Phase 1: every job is in the queue, so one squeue answers for all of them and sacct is never asked.
        ctld_types = MonitorTypes(ctld_reads)
        for cycle in range(1, MAX_CYCLES + 1):
            window = measure(monitor.cycle)
            if window.slurmctld is not None:
                assert_one_cycle_made(window.slurmctld, monitor_uid, poll_rpcs, "slurmctld")
                ctld_types.add(window.slurmctld)
            if window.slurmdbd is not None:
                assert_one_cycle_made(window.slurmdbd, monitor_uid, Counter(), "slurmdbd")
            if cycle >= MIN_CYCLES and ctld_types.exact(poll_rpcs.total()):
                break
        assert ctld_types.exact(poll_rpcs.total()) == poll_rpcs, (
            f"slurmctld RPCs of one cycle, {LIVE_JOBS} jobs queued, bounded over {cycle} cycles: {ctld_types.bound}"
        )
        runs = runs_by_job(engine)
        assert {(run.state, run.scheduler_reason) for run in runs.values()} == {(RunState.pending, "JobHeldUser")}

        # Phase 2: some jobs have left the queue; one sacct asks about all of them at once.
        gone, queued = job_ids[:LEFT_QUEUE], job_ids[LEFT_QUEUE:]
        cancel_and_wait_for_accounting(gone)
        if backend == "slurmrestd":
            # The controller's listing has the cancelled jobs' end and exit code until MinJobAge has passed: only
            # jobs it no longer has go to sacct. Ids above Slurm's MaxJobId stand for those (it never had them).
            for position in range(LEFT_QUEUE):
                job_id = str(FORGOTTEN_JOB_IDS + position)
                run_row(
                    session, experiment, job_dir / f"forgotten-{position}", position=LIVE_JOBS + position,
                    job_id=job_id, scheduler=scheduler.name,
                )  # fmt: skip
        ctld_types, dbd_types = MonitorTypes(ctld_reads), MonitorTypes(dbd_reads)
        for cycle in range(1, MAX_CYCLES + 1):
            back_to_pending(engine, gone)
            window = measure(monitor.cycle)
            runs = runs_by_job(engine)
            assert {runs[job].state for job in gone} == {RunState.cancelled}, [runs[job] for job in gone]
            assert {runs[job].state for job in queued} == {RunState.pending}, [runs[job] for job in queued]
            if window.slurmctld is not None:
                assert_one_cycle_made(window.slurmctld, monitor_uid, poll_rpcs, "slurmctld")
                ctld_types.add(window.slurmctld)
            if window.slurmdbd is not None:
                assert_one_cycle_made(window.slurmdbd, monitor_uid, SACCT_RPCS, "slurmdbd")
                dbd_types.add(window.slurmdbd)
            if cycle >= MIN_CYCLES and ctld_types.exact(poll_rpcs.total()) and dbd_types.exact(SACCT_RPCS.total()):
                break
        assert ctld_types.exact(poll_rpcs.total()) == poll_rpcs, (
            f"slurmctld RPCs of one cycle, {len(gone)} jobs gone, bounded over {cycle} cycles: {ctld_types.bound}"
        )
        assert dbd_types.exact(SACCT_RPCS.total()) == SACCT_RPCS, (
            f"slurmdbd RPCs of one cycle, {len(gone)} jobs gone, bounded over {cycle} cycles: {dbd_types.bound}"
        )
    finally:
        if job_ids:
            subprocess.run(["scancel", *job_ids], capture_output=True, timeout=30, check=False)
