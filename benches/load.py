"""Load: clients submitting experiments and readers of runs, comparisons, metrics and pages, all at once, against
one real server (uvicorn, one SQLite file) on the real Slurm.

Every job the server submits is held (an `sbatch` that adds --hold comes first on its PATH), so none runs, and all
are cancelled at the end. Afterwards the database is checked against what the clients were told and against Slurm:
every run a client was told about is in the database exactly once, and each run's job is the one Slurm has under
the run's name, once. Printed: requests and latency percentiles per operation, status codes, runs in the database
and jobs in Slurm, and whether "database is locked" reached a client or the server's log.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import math
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benches.common import load_average, slurm_is_up, table, work_dir
from benches.held_jobs import SlurmCommandFailed, cancel_jobs_of_runs, hold_wrapper, queue
from benches.http_client import Connection, TransportError
from benches.server_process import ServerDidNotStart, running_server
from benches.targets import Target, server_processes, table_of

DEFAULT_SECONDS = 60.0
SUBMITTERS = 50
READERS = 200
# Submitting clients act for this many users (several clients per user, as a class shares a few accounts).
LOAD_USERS = 10
# The quotas a shared instance would give everyone, and the raised ones of the load users (which never reach them).
DEFAULT_QUOTAS = {
    "SCALELAB_MAX_CONCURRENT_RUNS": "8",
    "SCALELAB_MAX_GPUS_IN_USE": "16",
    "SCALELAB_MAX_RUNS_PER_DAY": "50",
}
RAISED_QUOTA = 10**6
GPUS = [1, 2]  # each experiment: two runs, as a small scaling sweep
REQUEST_TIMEOUT_S = 300.0
# Jobs left free under MaxJobCount for everyone else using the controller meanwhile.
JOB_MARGIN = 2000
LOCKED = "database is locked"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benches.load", description=__doc__)
    parser.add_argument(
        "--seconds",
        type=float,
        default=float(os.environ.get("SCALELAB_LOAD_SECONDS", DEFAULT_SECONDS)),
        help="how long the clients keep sending (default: $SCALELAB_LOAD_SECONDS, else %(default)s)",
    )
    parser.add_argument("--submitters", type=int, default=SUBMITTERS, help="clients submitting experiments")
    parser.add_argument("--readers", type=int, default=READERS, help="clients reading runs, comparisons and pages")
    parser.add_argument("--workers", type=int, default=1, help="server processes, one of them monitoring (default 1)")
    parser.add_argument("--tmp", type=Path, help="where to put the server's database, run directories and log")
    return parser


# ---- the clients --------------------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients saw: latencies and statuses per operation, and the runs the server said it created."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    statuses: dict[str, collections.Counter[int]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )
    errors: list[str] = field(default_factory=list)  # transport errors: no answer at all
    locked: list[str] = field(default_factory=list)  # answers that mention a locked database
    server_errors: list[str] = field(default_factory=list)
    experiments: list[str] = field(default_factory=list)
    runs: dict[str, str | None] = field(default_factory=dict)  # run id -> job id, as the 201s said
    run_ids: list[str] = field(default_factory=list)  # the same ids, for readers to pick from
    refused: int = 0  # submissions refused for the job budget (none when the budget suffices)

    def created(self, body: dict[str, Any]) -> None:
        """Note an experiment a 201 announced, and its runs."""
        self.experiments.append(body["id"])
        self.runs.update({run["id"]: run["job_id"] for run in body["runs"]})
        self.run_ids.extend(run["id"] for run in body["runs"])

    def requests(self) -> int:
        return sum(sum(counter.values()) for counter in self.statuses.values())


async def _send(client: Connection, tally: Tally, operation: str, method: str, url: str, **kw: Any) -> Any:
    started = time.perf_counter()
    try:
        response = await client.request(method, url, **kw)
    except TransportError as exc:
        tally.errors.append(f"{operation} {url}: {exc}")
        return None
    tally.latencies[operation].append(time.perf_counter() - started)
    tally.statuses[operation][response.status_code] += 1
    # Only a refusal can say the database was locked: a page or list that succeeded is not read (reading every
    # answer cost the clients more CPU than the server spent making it).
    if response.status_code >= 400 and LOCKED in response.text:
        tally.locked.append(f"{operation} {url}: {response.status_code} {response.text[:200]}")
    if response.status_code >= 500:
        tally.server_errors.append(f"{operation} {url}: {response.status_code} {response.text[:300]}")
    return response


def experiment(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "base": {"model": "mlp", "dataset": "synthetic", "strategy": "ddp", "epochs": 1, "global_batch_size": 64},
        "grid": {"gpus": GPUS},
        "resources": {"nodes": 1, "time_limit": "00:10:00"},
        # Every run goes to Slurm at once (held there): exclusive runs would wait in scalelab for their turn.
        "isolation": "shared",
    }


class JobBudget:
    """How many more jobs the clients may make Slurm hold: the controller is shared, and MaxJobCount is finite."""

    def __init__(self, jobs: int) -> None:
        self.left = jobs

    def take(self, jobs: int) -> bool:
        if self.left < jobs:
            return False
        self.left -= jobs
        return True


async def _submitter(url: str, token: str, index: int, stop_at: float, tally: Tally, budget: JobBudget) -> None:
    """One submitting client on a connection of its own, until `stop_at` or the job budget is spent."""
    headers = {"Authorization": f"Bearer {token}"}
    n = 0
    async with Connection(url, REQUEST_TIMEOUT_S) as client:
        while time.monotonic() < stop_at:
            if not budget.take(len(GPUS)):
                tally.refused += 1
                await asyncio.sleep(1)
                continue
            n += 1
            response = await _send(client, tally, "submit", "POST", "/api/experiments",
                                   json=experiment(f"load {index}.{n}"), headers=headers)  # fmt: skip
            if response is not None and response.status_code == 201:
                tally.created(response.json())


# What a reader asks for, in turn: the API's lists and details, the comparison, metrics, and the pages.
READS: tuple[tuple[str, str], ...] = (
    ("runs list", "/api/runs?limit=50"),
    ("run", "/api/runs/{run}"),
    ("run page", "/runs/{run}"),
    ("compare", "/api/compare?experiment_id={experiment}&history=true"),
    ("metrics", "/api/runs/{run}/metrics"),
    ("experiments list", "/api/experiments?limit=50"),
    ("runs page", "/runs"),
    ("compare page", "/experiments/{experiment}"),
    ("home page", "/"),
)


async def _reader(url: str, token: str, index: int, stop_at: float, tally: Tally) -> None:
    """One reader on a connection of its own, asking for what READS lists, in turn, until `stop_at`."""
    headers = {"Authorization": f"Bearer {token}"}
    rng = random.Random(index)  # noqa: S311 (which run to read, not a secret)
    turn = index  # readers start at different operations, so every one is under load from the first second
    async with Connection(url, REQUEST_TIMEOUT_S) as client:
        while time.monotonic() < stop_at:
            operation, template = READS[turn % len(READS)]
            turn += 1
            path = template.format(run=rng.choice(tally.run_ids), experiment=rng.choice(tally.experiments))
            await _send(client, tally, operation, "GET", path, headers=headers)


async def drive(
    url: str, submit_tokens: list[str], read_token: str, seconds: float, submitters: int, readers: int, jobs: int
) -> Tally:
    """Run the clients for `seconds`; requests under way then are waited for."""
    tally = Tally()
    budget = JobBudget(jobs)
    async with Connection(url, REQUEST_TIMEOUT_S) as client:
        # One experiment first, so that readers have runs to read from the start.
        first = await _send(client, tally, "submit", "POST", "/api/experiments", json=experiment("load: first"),
                            headers={"Authorization": f"Bearer {submit_tokens[0]}"})  # fmt: skip
    if first is None or first.status_code != 201:
        raise LoadFailed(f"the first submission failed: {first.text[:500] if first is not None else tally.errors}")
    tally.created(first.json())
    stop_at = time.monotonic() + seconds
    tasks = [
        _submitter(url, submit_tokens[i % len(submit_tokens)], i, stop_at, tally, budget) for i in range(submitters)
    ]
    tasks += [_reader(url, read_token, i, stop_at, tally) for i in range(readers)]
    await asyncio.gather(*tasks)
    return tally


class LoadFailed(RuntimeError):
    """The load could not even start; the message says why."""


# ---- before and after: users, the database, Slurm -----------------------------------------------------------------


def make_users(database_url: str, count: int) -> tuple[list[str], str]:
    """Submitting users with raised quotas and a reading user, in a new database; their tokens."""
    from sqlmodel import Session

    from server.db import init_db, make_engine
    from server.services import users

    engine = make_engine(database_url)
    init_db(engine)
    raised = users.Quotas(max_concurrent_runs=RAISED_QUOTA, max_gpus_in_use=RAISED_QUOTA, max_runs_per_day=RAISED_QUOTA)
    with Session(engine) as session:
        submit = [users.add_user(session, f"load{i}", quotas=raised) for i in range(count)]
        # An admin, who may read every run: a plain user would be answered 404 for others' runs, cheap answers
        # that measure nothing of the reads.
        read = users.add_user(session, "reader", is_admin=True)
    engine.dispose()
    return submit, read


def job_budget() -> tuple[int, str]:
    """How many jobs this load may add to the controller, and a line that says why."""
    result = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise SlurmCommandFailed(f"scontrol show config failed: {result.stderr.strip()}")
    pairs = (line.partition(" = ") for line in result.stdout.splitlines())
    config = {key.strip(): value.strip() for key, _, value in pairs}
    max_jobs = int(config["MaxJobCount"])
    known = len(queue())
    budget = max(0, max_jobs - known - JOB_MARGIN)
    return budget, f"MaxJobCount {max_jobs}, {known} jobs known to slurmctld: this load may add {budget} held jobs"


@dataclass
class Audit:
    """The database against what the clients were told, and against Slurm."""

    db_experiments: int
    db_runs: int
    db_jobs: int  # runs with a job id
    slurm_jobs: int  # jobs in Slurm named after one of the database's runs
    lost: list[str]  # runs a client was told about, missing from the database
    untold: list[str]  # runs in the database no client was told about
    wrong_job: list[str]  # runs whose job id differs from what the client was told, or from Slurm's
    duplicated_jobs: list[str]  # run names Slurm holds more than one job for
    not_in_slurm: list[str]  # database job ids Slurm does not know
    log_locked: int  # "database is locked" lines in the server's log
    log_tracebacks: int

    def problems(self, tally: Tally) -> list[str]:
        found = []
        for name in ("lost", "untold", "wrong_job", "duplicated_jobs", "not_in_slurm"):
            items = getattr(self, name)
            if items:
                found.append(f"{len(items)} {name.replace('_', ' ')}: {items[:5]}")
        if self.db_experiments != len(set(tally.experiments)):
            found.append(f"{self.db_experiments} experiments in the database, {len(set(tally.experiments))} told")
        if self.db_jobs != self.slurm_jobs:
            found.append(f"{self.db_jobs} jobs in the database, {self.slurm_jobs} in Slurm")
        if self.log_locked:
            found.append(f"{LOCKED!r} {self.log_locked} times in the server's log")
        if self.log_tracebacks:
            found.append(f"{self.log_tracebacks} tracebacks in the server's log")
        return found


def audit(database_url: str, log: Path, tally: Tally) -> Audit:
    from sqlalchemy import func, select
    from sqlmodel import col

    from server.db import make_engine
    from server.models import Experiment, Run

    engine = make_engine(database_url)
    with engine.connect() as connection:
        db_experiments = connection.execute(select(func.count()).select_from(Experiment)).scalar_one()
        rows: dict[str, str | None] = dict(connection.execute(select(col(Run.id), col(Run.job_id))).all())
    engine.dispose()
    slurm: dict[str, list[str]] = collections.defaultdict(list)  # run id -> its jobs
    names = {f"scalelab-{run_id}": run_id for run_id in rows}
    for job_id, name, _state in queue():
        if name in names:
            slurm[names[name]].append(job_id)
    lost = sorted(set(tally.runs) - set(rows))
    untold = sorted(set(rows) - set(tally.runs))
    wrong = [
        run_id
        for run_id, job_id in rows.items()
        if (run_id in tally.runs and tally.runs[run_id] != job_id) or (job_id and slurm.get(run_id) != [job_id])
    ]
    text = log.read_text(errors="replace") if log.exists() else ""
    return Audit(
        db_experiments=db_experiments,
        db_runs=len(rows),
        db_jobs=sum(job_id is not None for job_id in rows.values()),
        slurm_jobs=sum(len(jobs) for jobs in slurm.values()),
        lost=lost,
        untold=untold,
        wrong_job=sorted(wrong),
        duplicated_jobs=sorted(run_id for run_id, jobs in slurm.items() if len(jobs) > 1),
        not_in_slurm=sorted(run_id for run_id, job_id in rows.items() if job_id and run_id not in slurm),
        log_locked=text.count(LOCKED),
        log_tracebacks=text.count("Traceback (most recent call last)"),
    )


# ---- the figures --------------------------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else float("nan")


def report(tally: Tally, found: Audit, seconds: float, submitters: int, readers: int) -> str:
    rows = []
    for operation in sorted(tally.latencies, key=lambda op: (op != "submit", op)):
        lat = tally.latencies[operation]
        statuses = ", ".join(f"{code}: {n}" for code, n in sorted(tally.statuses[operation].items()))
        rows.append(
            [
                operation,
                str(len(lat)),
                f"{len(lat) / seconds:.1f}",
                *(f"{percentile(lat, p) * 1000:.0f}" for p in (50, 95, 99)),
                f"{max(lat) * 1000:.0f}",
                statuses,
            ]
        )
    header = ["operation", "requests", "per s", "p50 ms", "p95 ms", "p99 ms", "max ms", "statuses"]
    fives = sum(n for counter in tally.statuses.values() for code, n in counter.items() if code >= 500)
    lines = [
        f"{submitters} submitting and {readers} reading clients for {seconds:.0f} s: {tally.requests()} requests "
        f"({tally.requests() / seconds:.1f} per s), {fives} answered 5xx, {len(tally.errors)} unanswered",
        table(header, rows),
        "",
        f"runs: {len(tally.runs)} told to clients in {len(set(tally.experiments))} experiments; in the database "
        f"{found.db_runs} runs in {found.db_experiments} experiments, {found.db_jobs} with a job; "
        f"in Slurm {found.slurm_jobs} jobs named after them",
        f"lost {len(found.lost)}, untold {len(found.untold)}, wrong job {len(found.wrong_job)}, "
        f"duplicated in Slurm {len(found.duplicated_jobs)}, missing from Slurm {len(found.not_in_slurm)}",
        f"{LOCKED!r}: {len(tally.locked)} answers, {found.log_locked} lines of the server's log; "
        f"{found.log_tracebacks} tracebacks in the log",
    ]
    if tally.refused:
        lines.append(f"{tally.refused} submissions not sent: the job budget was spent")
    return "\n".join(lines)


# ---- against issue 19's targets -------------------------------------------------------------------------------------

# The old main's figures on this machine (issue 19): 65-73 requests/s, p95 about 8.5 s for every read.
BASELINE_REQUESTS_PER_S = 69.0
BASELINE_READ_P95_S = 8.5
TARGET_READ_P95_S = 1.0
TARGET_SPEEDUP = 5.0


def targets(outcome: Outcome) -> list[Target]:
    """The load's figures against issue 19's targets: the p95 of all reads, requests per second, and nothing lost,
    duplicated or answered 5xx."""
    tally, found = outcome.tally, outcome.audit
    reads = [latency for operation, latencies in tally.latencies.items() if operation != "submit"
             for latency in latencies]  # fmt: skip
    fives = sum(n for counter in tally.statuses.values() for code, n in counter.items() if code >= 500)
    how, seconds = server_processes(outcome.workers), outcome.seconds
    return [
        Target("p95 of every read", "s", BASELINE_READ_P95_S, percentile(reads, 95), TARGET_READ_P95_S, False, how),
        Target("requests per second", "1/s", BASELINE_REQUESTS_PER_S, tally.requests() / seconds,
               TARGET_SPEEDUP * BASELINE_REQUESTS_PER_S, True, how),
        Target("runs lost or duplicated", "runs", 0, len(found.lost) + len(found.duplicated_jobs) + len(found.untold),
               0, False),
        Target("answers 5xx or none", "requests", 0, fives + len(tally.errors), 0, False),
    ]  # fmt: skip


# ---- one whole load -----------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    tally: Tally
    audit: Audit
    text: str
    seconds: float = 0.0  # how long the clients sent
    workers: int = 1  # server processes


def run_load(
    tmp: Path,
    seconds: float,
    submitters: int = SUBMITTERS,
    readers: int = READERS,
    workers: int = 1,
    database_url: str | None = None,
) -> Outcome:
    """Start a server in `tmp` (on `database_url`, an empty database, else a SQLite file there), load it, audit it,
    cancel every job it submitted; the figures."""
    budget, why = job_budget()
    database_url = database_url or f"sqlite:///{tmp / 'scalelab.db'}"
    submit_tokens, read_token = make_users(database_url, LOAD_USERS)
    env = {
        "PATH": hold_wrapper(tmp / "bin")["PATH"],
        "SCALELAB_AUTH": "true",
        "SCALELAB_DATABASE_URL": database_url,
        **DEFAULT_QUOTAS,
        # One job per run: the audit finds each run's job by its name (an array's tasks share the array's).
        "SCALELAB_JOB_ARRAYS": "false",
    }
    # The monitor follows the held jobs as it would real ones; the default interval, as deployed.
    env["SCALELAB_POLL_INTERVAL_S"] = "2"
    cpu_before = _children_cpu_s()
    try:
        with running_server(tmp, "slurm", env, args=["--workers", str(workers)]) as url:
            started = time.monotonic()
            # In a thread of its own: a caller may already run an event loop in this one (pytest after Playwright's
            # sync API does), and asyncio.run refuses to start a second.
            clients_before = time.process_time()
            with ThreadPoolExecutor(max_workers=1) as thread:
                clients = drive(url, submit_tokens, read_token, seconds, submitters, readers, budget)
                tally = thread.submit(asyncio.run, clients).result()
            elapsed = time.monotonic() - started
            clients_cpu = time.process_time() - clients_before
            found = audit(database_url, tmp / "server.log", tally)
    finally:
        cancel_jobs_of_runs(tmp / "runs")
    # The server has exited and been waited for, so its CPU time (and its sbatch and squeue calls') is counted now:
    # the cost of a request, which the other work on a shared machine does not change as it changes latency.
    cpu = _children_cpu_s() - cpu_before
    text = (
        f"{why}\n{report(tally, found, elapsed, submitters, readers)}\n"
        f"server CPU (with the Slurm commands it ran): {cpu:.1f} s, {cpu / max(tally.requests(), 1) * 1000:.1f} ms "
        f"per request; the clients' own CPU (one process, on the same cores): {clients_cpu:.1f} s, "
        f"{clients_cpu / max(tally.requests(), 1) * 1000:.1f} ms per request; {load_average()}"
    )
    return Outcome(tally, found, text, elapsed, workers)


def _children_cpu_s() -> float:
    times = os.times()
    return times.children_user + times.children_system


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    print(f"== Load: {args.submitters} clients submitting and {args.readers} reading for {args.seconds:.0f} s ==")
    if not slurm_is_up():
        print("SKIPPED: the local Slurm is not up (scripts/slurm-local up)")
        return 1 if os.environ.get("SCALELAB_REQUIRE_SLURM") == "1" else 0
    print(f"before: {load_average()}")
    with work_dir(args.tmp) as tmp:
        try:
            outcome = run_load(tmp, args.seconds, args.submitters, args.readers, args.workers)
        except (LoadFailed, ServerDidNotStart, SlurmCommandFailed) as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
    print(f"after: {load_average()}")
    print(outcome.text)
    print(table_of(targets(outcome)))
    problems = outcome.audit.problems(outcome.tally)
    for problem in problems + outcome.tally.server_errors[:5] + outcome.tally.errors[:5]:
        print(f"PROBLEM: {problem}")
    return 1 if problems or outcome.tally.server_errors or outcome.tally.errors or outcome.tally.locked else 0


if __name__ == "__main__":
    sys.exit(main())
