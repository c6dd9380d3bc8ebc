"""The monitor's cycle at centre scale, on the real local Slurm: thousands of live runs (held jobs, which wait and
load nothing) and thousands of other users' jobs in the same queue.

The monitor's Slurm commands run as a service account of their own (made if missing), as a shared instance's do,
through the scheduler's own runner, under that account's uid: as root, squeue always fetches the whole job table, so
only a real account shows the controller's filtering. Phases:

1. only the runs' jobs are queued: a first cycle (every run's first state is written), then steady cycles;
2. the other users' jobs are queued beside them: steady cycles with today's squeue (--me, the service's jobs
   only), then with the old main's squeue (no --me: the whole job table, filtered by squeue) as the baseline.

Figures: cycle seconds, scheduler calls per cycle, the rows and bytes squeue returns, and squeue's CPU time with
and without the others' jobs queued, which must not grow with them.

Run as root: `python -m benches.monitor_cycle` (full scale: 5,000 runs and 10,000 others' jobs, as far as the
controller's MaxJobCount allows; --live/--others for less). All its jobs are cancelled at the end; slurmctld
still counts them against MaxJobCount for MinJobAge (300 s here) after that.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import re
import resource
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session

from benches import held_jobs
from benches.common import load_average
from benches.targets import Target, table_of
from contract.states import RunState
from server.db import init_db, make_engine
from server.models import Experiment, Run, utcnow
from server.monitor import Monitor
from server.scheduler import SchedulerUnavailable
from server.scheduler.naming import job_name
from server.scheduler.slurm import SlurmScheduler

SERVICE_USER = "scalelab-bench-svc"
OTHER_USER = "scalelab-bench-other"
LIVE_RUNS = 5_000
OTHER_JOBS = 10_000
STEADY_CYCLES = 5
CYCLE_TARGET_S = 2.0
# Jobs left free under the controller's MaxJobCount for everyone else using the shared Slurm meanwhile.
HEADROOM = 500
SUBMITTERS = 8
HELD = "#!/bin/sh\n#SBATCH --hold\n#SBATCH --time=1\n#SBATCH --output=/dev/null\ntrue\n"


class BenchRefused(RuntimeError):
    """The benchmark cannot run here; the message says why and what to do."""


# ---- Slurm: accounts, capacity, held jobs ----------------------------------------------------------------------------


def ensure_user(name: str) -> None:
    """A system account of that name, made if missing (the same way the polling-cost test makes its own)."""
    with contextlib.suppress(KeyError):
        pwd.getpwnam(name)
        return
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        check=False,
    )
    pwd.getpwnam(name)  # raises if it still does not exist


def max_job_count() -> int:
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"^MaxJobCount\s*=\s*(\d+)", config, re.MULTILINE)
    return int(found[1]) if found else 10_000


def jobs_in_controller() -> int:
    return len(held_jobs.queue())


def submit_held(user: str, names: Sequence[str], work: Path) -> list[str]:
    """Held jobs of `user`, one sbatch each (as users submit), several at a time; their ids in order."""
    script = work / f"held-{user}.sbatch"
    script.write_text(HELD)
    script.chmod(0o644)

    def one(name: str) -> str:
        result = as_user(user, ["sbatch", "--parsable", f"--job-name={name}", "--chdir=/tmp", str(script)])
        if result.returncode != 0:
            raise held_jobs.SlurmCommandFailed(f"sbatch as {user} failed: {result.stderr.strip()}")
        return result.stdout.strip().split(";")[0]

    with ThreadPoolExecutor(SUBMITTERS) as pool:
        return list(pool.map(one, names))


def as_user(user: str, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """A command run as that account (its uid, gid and no other groups), as a process of the service would run it:
    no runuser or PAM session in between, so the CPU measured is the command's own."""
    account = pwd.getpwnam(user)
    try:
        return subprocess.run(
            argv, user=account.pw_uid, group=account.pw_gid, extra_groups=[], capture_output=True, text=True,
            timeout=held_jobs.SLURM_TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise SchedulerUnavailable(f"{argv[0]} did not answer within {held_jobs.SLURM_TIMEOUT_S:.0f} s") from None


# ---- the monitor's commands, counted ---------------------------------------------------------------------------------


@dataclass
class Call:
    command: str
    wall_s: float
    cpu_s: float  # the command's own CPU, from the children's rusage
    stdout_bytes: int
    rows: int


@dataclass
class CountingRunner:
    """The scheduler's runner as the service account; counts each command. `old_main`: squeue as the old main
    called it, without --me."""

    user: str
    old_main: bool = False
    calls: list[Call] = field(default_factory=list)

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        argv = [arg for arg in argv if not (self.old_main and arg == "--me")]
        before, started = _children_cpu(), time.perf_counter()
        result = as_user(self.user, argv)
        wall, cpu = time.perf_counter() - started, _children_cpu() - before
        self.calls.append(Call(argv[0], wall, cpu, len(result.stdout.encode()), len(result.stdout.splitlines())))
        return result


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Cycle:
    seconds: float
    calls: list[Call]

    def count(self, command: str) -> int:
        return sum(call.command == command for call in self.calls)

    def squeue(self) -> Call:
        return next(call for call in self.calls if call.command == "squeue")


def cycles(monitor: Monitor, runner: CountingRunner, count: int) -> list[Cycle]:
    measured = []
    for _ in range(count):
        runner.calls.clear()
        started = time.perf_counter()
        monitor.cycle()
        measured.append(Cycle(time.perf_counter() - started, list(runner.calls)))
    return measured


# ---- the benchmark -------------------------------------------------------------------------------------------------


def live_runs(engine: Engine, job_ids: Sequence[str], run_ids: Sequence[str], work: Path, created_at: datetime) -> None:
    """The runs in the database, submitted and not yet polled, each with its held job; made (as scalelab makes a
    run) before its job was submitted, or the monitor would not take the job's record for the run's."""
    with Session(engine) as session:
        experiment = Experiment(name="monitor-cycle", request={"name": "monitor-cycle"})
        session.add(experiment)
        session.flush()
        for position, (run_id, job_id) in enumerate(zip(run_ids, job_ids, strict=True)):
            session.add(
                Run(
                    id=run_id, experiment_id=experiment.id, position=position, scheduler="slurm",
                    state=RunState.submitted, spec={}, run_dir=str(work / "runs" / run_id), job_id=job_id,
                    created_at=created_at,
                )
            )  # fmt: skip
        session.commit()


@contextlib.contextmanager
def cancelled_at_exit() -> Iterator[list[str]]:
    job_ids: list[str] = []
    try:
        yield job_ids
    finally:
        held_jobs.cancel(job_ids)


def targets(live: int = LIVE_RUNS, others: int = OTHER_JOBS, steady: int = STEADY_CYCLES) -> list[Target]:
    if os.geteuid() != 0:
        raise BenchRefused("run it as root: it makes the service account and runs the monitor's commands as it")
    for user in (SERVICE_USER, OTHER_USER):
        ensure_user(user)
    room = max_job_count() - jobs_in_controller() - HEADROOM - live
    if room < 0:
        raise BenchRefused(f"the controller has no room for {live} more jobs (MaxJobCount {max_job_count()})")
    capped = others > room
    others = min(others, room)

    with tempfile.TemporaryDirectory(prefix="scalelab-monitor-cycle-") as tmp, cancelled_at_exit() as submitted:
        work = Path(tmp)
        work.chmod(0o755)
        engine = make_engine(f"sqlite:///{work / 'scalelab.db'}")
        init_db(engine)
        run_ids = [f"r{index:09d}" for index in range(live)]
        created_at, started = utcnow(), time.perf_counter()
        submitted += submit_held(SERVICE_USER, [job_name(run_id) for run_id in run_ids], work)
        submit_s = time.perf_counter() - started
        live_runs(engine, submitted, run_ids, work, created_at)

        runner = CountingRunner(SERVICE_USER)
        monitor = Monitor(engine, SlurmScheduler(run=runner), interval_s=0)
        first = cycles(monitor, runner, 1)[0]
        alone = cycles(monitor, runner, steady)

        submitted += submit_held(OTHER_USER, [f"other-{index}" for index in range(others)], work)
        beside = cycles(monitor, runner, steady)
        runner.old_main = True
        old = cycles(monitor, runner, steady)
        runner.old_main = False
        engine.dispose()

    def median(values: Sequence[float]) -> float:
        return statistics.median(values)

    scale = f"{live:,} live runs + {others:,} others' jobs"
    cap_note = (
        f"others capped at {others:,} by MaxJobCount {max_job_count():,} (raise it for the full scale)"
        if capped
        else ""
    )
    now_cycle = median([c.seconds for c in beside])
    squeue_alone = median([c.squeue().cpu_s for c in alone])
    squeue_beside = median([c.squeue().cpu_s for c in beside])
    squeue_old = median([c.squeue().cpu_s for c in old])
    return [
        Target(f"monitor cycle, {scale}", "s", median([c.seconds for c in old]), now_cycle, CYCLE_TARGET_S, False,
               f"median of {steady}; baseline: this cycle with old main's squeue (no --me); {cap_note}".rstrip("; ")),
        Target(f"first cycle ({live:,} runs' first state written)", "s", None, first.seconds, CYCLE_TARGET_S, False,
               "once per submission wave"),
        Target("squeue calls per cycle", "calls", max(c.count("squeue") for c in old),
               max(c.count("squeue") for c in [first, *alone, *beside]), 1, False),
        Target("sacct calls per cycle", "calls", max(c.count("sacct") for c in old),
               max(c.count("sacct") for c in [first, *alone, *beside]), 1, False),
        Target("squeue rows returned per cycle", "rows", median([c.squeue().rows for c in old]),
               median([c.squeue().rows for c in beside]), live, False, "the runs' jobs only"),
        Target("squeue bytes returned per cycle", "bytes", median([c.squeue().stdout_bytes for c in old]),
               median([c.squeue().stdout_bytes for c in beside]), median([c.squeue().stdout_bytes for c in alone]),
               False, "target: the same as with no other jobs queued"),
        Target("squeue CPU, others' jobs queued / none", "ratio", squeue_old / squeue_alone,
               squeue_beside / squeue_alone, 1.25, False,
               f"squeue CPU {squeue_alone * 1000:.0f} ms alone, {squeue_beside * 1000:.0f} ms beside "
               f"{others:,} others' jobs ({squeue_old * 1000:.0f} ms with old main's squeue); "
               f"{live:,} held jobs submitted in {submit_s:.0f} s"),
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benches.monitor_cycle", description=__doc__.splitlines()[0])
    parser.add_argument("--live", type=int, default=LIVE_RUNS, help="live runs, each a held job of the service")
    parser.add_argument("--others", type=int, default=OTHER_JOBS, help="held jobs of another user in the queue")
    parser.add_argument("--cycles", type=int, default=STEADY_CYCLES, help="steady cycles measured per phase")
    args = parser.parse_args(argv)
    measured = targets(args.live, args.others, args.cycles)
    print(table_of(measured))
    print(load_average())


if __name__ == "__main__":
    main()
