"""Server CPU per read request: what one request of each kind costs the server process, by its own CPU clock.

A database of 200 finished runs (the web benchmark's workload: experiments of 4 to 64 runs, about 200 metric
records each, every run ended and read to the end), a real `python -m server` on it (authentication on: each
request carries an API token), and for each read 200 sequential requests after one pass over its distinct paths
(the one run and its metrics: each of the 200 runs in turn); the CPU time the scheduler gave the server's threads
over them (/proc/PID/task/*/schedstat, to the nanosecond), divided by the requests, the least of five such
rounds, the reads taking turns round by round. The first pass's cost, before the server has kept anything, is
printed too. Wall time is printed as well but is not the figure: on a shared machine it drifts with the load,
while the CPU a request costs drifts less (but still does: a busy host adds to it, never takes from it).

The monitor's interval is set long, so that the figure is the requests' cost alone (with every run ended, a cycle
has nothing to do, but it would still be counted in whichever request it fell into).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from sqlalchemy import update
from sqlmodel import Session

from benches.common import BenchError, load_average, work_dir
from benches.server_process import ServerDidNotStart, running_server
from benches.targets import Target, table_of
from benches.web import server_pid, threads_cpu_ns
from benches.web_seed import seeded_database
from benches.web_workload import plan
from contract.states import RunState
from server.models import Run
from server.services import users

RUNS = 200
RECORDS_PER_RUN = 200  # as in the web benchmark's full workload: 2,000,000 records over 10,000 runs
REQUESTS = 200
WARMUP = 5  # requests at least in the first pass, before the measured ones
ROUNDS = 5  # of `requests` each: the figure is the least
TRIES = 3  # of a round, where a thread of the server ends during it
HTTP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Read:
    """One kind of read request: its name in the table, the issue's baseline and target (ms of CPU per request)."""

    what: str
    baseline_ms: float
    target_ms: float


RUNS_LIST = Read("GET /api/runs?limit=100", 10.2, 2.0)
COMPARE = Read("GET /api/compare, 200 runs", 19.8, 5.0)
RUNS_PAGE = Read("GET /runs (the page)", 17.4, 4.0)
ONE_RUN = Read("GET /api/runs/{id}", 2.3, 1.0)
ONE_RUNS_METRICS = Read("GET /api/runs/{id}/metrics", 3.1, 1.5)
# The reads by the names --only takes.
KINDS = {"list": RUNS_LIST, "compare": COMPARE, "page": RUNS_PAGE, "run": ONE_RUN, "metrics": ONE_RUNS_METRICS}


@dataclass(frozen=True)
class Measured:
    read: Read
    cpu_ms: float  # per request, in the steady state: each path asked for once before
    wall_ms: float
    first_cpu_ms: float  # per request, the first time each path is asked for (nothing kept yet)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benches.reads", description=__doc__)
    parser.add_argument("--runs", type=int, default=RUNS, help="finished runs in the database (default %(default)s)")
    parser.add_argument("--requests", type=int, default=REQUESTS, help="requests of each kind (default %(default)s)")
    parser.add_argument("--tmp", type=Path, help="where to put the database and the server's log (kept)")
    parser.add_argument(
        "--only", nargs="+", choices=sorted(KINDS), help="only these reads (default: all of them)", metavar="READ"
    )
    return parser


def seed_finished_runs(work: Path, runs: int) -> tuple[list[str], str]:
    """The database: `runs` runs, every one ended and read to the end; their ids, and a reader's API token."""
    workload = plan(runs, runs * RECORDS_PER_RUN)
    engine, seeded = seeded_database(work / "scalelab.db", workload)
    try:
        with Session(engine) as session:
            # The workload's newest experiments are still under way: here every run has ended.
            session.exec(update(Run).values(state=RunState.completed, ingest_done=True))
            session.commit()
            # An admin sees every run, so that every request reads the whole selection.
            token = users.add_user(session, "reader", is_admin=True)
    finally:
        engine.dispose()
    return list(seeded.run_ids.values()), token


def cpu_ms_per_get(client: httpx.Client, paths: Sequence[str], pid: int | None, requests: int) -> tuple[float, float]:
    """CPU and wall ms per request over `requests` GETs cycling through `paths`: the CPU the server's threads were
    scheduled for meanwhile (benches.web.threads_cpu_ns), measured again if one of them ended on the way (the time
    of an ended thread is no longer there to be read)."""
    if pid is None or not Path(f"/proc/{pid}/task").is_dir():
        raise BenchError("the server's CPU time cannot be read from /proc")
    for _ in range(TRIES):
        before = threads_cpu_ns(pid)
        started = time.perf_counter()
        for index in range(requests):
            _get(client, paths[index % len(paths)])
        wall = time.perf_counter() - started
        after = threads_cpu_ns(pid)
        if before.keys() <= after.keys():
            cpu_ns = sum(ns - before.get(tid, 0) for tid, ns in after.items())
            return cpu_ns / requests / 1e6, wall / requests * 1000
    raise BenchError(f"a thread of the server ended during each of {TRIES} tries: its CPU time could not be read")


def _get(client: httpx.Client, path: str) -> None:
    response = client.get(path)
    if response.status_code != 200:
        raise BenchError(f"GET {path[:120]} answered {response.status_code}: {response.text[:300]}")


def measure(work: Path, runs: int, requests: int, only: Sequence[str] = ()) -> list[Measured]:
    run_ids, token = seed_finished_runs(work, runs)
    compare = "/api/compare?" + "&".join(f"run_id={run_id}" for run_id in run_ids)
    one_run = [f"/api/runs/{run_id}" for run_id in run_ids]
    env = {"SCALELAB_AUTH": "true", "SCALELAB_POLL_INTERVAL_S": "600"}
    headers = {"Authorization": f"Bearer {token}"}
    with (
        running_server(work, "local", env) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S, headers=headers) as client,
    ):
        pid = server_pid(url)
        reads = [
            (RUNS_LIST, ["/api/runs?limit=100"]),
            (COMPARE, [compare]),
            (RUNS_PAGE, ["/runs"]),
            (ONE_RUN, one_run),
            (ONE_RUNS_METRICS, [f"{path}/metrics" for path in one_run]),
        ]
        wanted = {KINDS[name] for name in only} if only else set(KINDS.values())
        reads = [(read, paths) for read, paths in reads if read in wanted]
        # The first pass over the distinct paths fills what the server keeps; the figure is the next passes, as a
        # dashboard's polls are, and the first pass's cost is printed beside it.
        first = [cpu_ms_per_get(client, paths, pid, max(len(paths), WARMUP))[0] for _, paths in reads]
        # Other work on the machine only ever adds to a process's CPU time (cache misses, a core taken from this
        # virtual machine, hand-offs between threads that wait for one): the least of a few rounds is the
        # request's own cost. The reads take turns round by round, so that a busy spell of the machine, which
        # lasts seconds, does not fall on every round of one read.
        rounds = [[cpu_ms_per_get(client, paths, pid, requests) for _, paths in reads] for _ in range(ROUNDS)]
        return [
            Measured(read, *min(taken[index] for taken in rounds), first[index])
            for index, (read, _) in enumerate(reads)
        ]


def targets(measured: Sequence[Measured], note: str = "") -> list[Target]:
    return [
        Target(m.read.what, "ms CPU/request", m.read.baseline_ms, m.cpu_ms, m.read.target_ms, False, note)
        for m in measured
    ]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    print(f"server CPU per read request, {args.runs} finished runs, {args.requests} requests each ({load_average()})")
    try:
        with work_dir(args.tmp) as work:
            measured = measure(work, args.runs, args.requests, args.only or ())
    except (BenchError, ServerDidNotStart) as exc:
        print(f"benches.reads: {exc}", file=sys.stderr)
        return 1
    print(table_of(targets(measured)))
    print("ms CPU per request the first time each is asked for (nothing kept yet): "
          + ", ".join(f"{m.read.what} {m.first_cpu_ms:.1f}" for m in measured))  # fmt: skip
    print("wall ms per request (not the figure: it drifts with the machine's load): "
          + ", ".join(f"{m.read.what} {m.wall_ms:.1f}" for m in measured))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
