"""Centre scale in one run: every benchmark of issue 19 (ingestion on SQLite and PostgreSQL, server CPU per read,
the 50 + 200-client load, live lag, the monitor's cycle), their figures printed in one table beside the old main's
and the target, each marked met or not.

Each part is a benchmark of its own (python -m benches.ingest, .reads, .load, .live_lag, .monitor_cycle, each with
--help); this runs them one after the other at the issue's scale, or at a small one with --quick (a few minutes,
for trying it: figures at that scale are not the issue's). A part that cannot run here (no Slurm, no PostgreSQL,
not root) is said to be skipped and why; the others still run.

PostgreSQL: --postgres-url names a server on which the role may create databases (scripts/postgres-local up prints
one); each run makes a database of its own there and drops it afterwards.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from benches import ingest, live_lag, load, monitor_cycle, reads
from benches.common import BenchError, load_average, slurm_is_up, work_dir
from benches.postgres import postgres_database
from benches.server_process import ServerDidNotStart
from benches.targets import Target, table_of


@dataclass(frozen=True)
class Scale:
    """How big each part is."""

    ingest_runs: int
    ingest_records: int
    read_runs: int
    read_requests: int
    load_seconds: float
    lag_runs: int
    lag_seconds: float
    lag_readers: int
    cycle_live: int
    cycle_others: int


FULL = Scale(
    ingest_runs=ingest.FULL_RUNS, ingest_records=ingest.FULL_RECORDS_PER_RUN, read_runs=reads.RUNS,
    read_requests=reads.REQUESTS, load_seconds=load.DEFAULT_SECONDS, lag_runs=live_lag.RUNS,
    lag_seconds=live_lag.SECONDS, lag_readers=load.READERS, cycle_live=monitor_cycle.LIVE_RUNS,
    cycle_others=monitor_cycle.OTHER_JOBS,
)  # fmt: skip
QUICK = Scale(
    ingest_runs=50, ingest_records=400, read_runs=50, read_requests=50, load_seconds=20, lag_runs=50,
    lag_seconds=20, lag_readers=20, cycle_live=500, cycle_others=1_000,
)  # fmt: skip


class Skipped(Exception):
    """A part that cannot run on this machine; the message says why and what would let it."""


def _ingest_sqlite(scale: Scale, workers: int, postgres_url: str | None) -> list[Target]:
    with work_dir(None) as work:
        figures = ingest.measure(work, None, scale.ingest_runs, scale.ingest_records, ingest.NEW_PER_RUN)
    return ingest.targets(figures, "sqlite")


def _ingest_postgres(scale: Scale, workers: int, postgres_url: str | None) -> list[Target]:
    if not postgres_url:
        raise Skipped("no PostgreSQL: give --postgres-url (scripts/postgres-local up prints one)")
    with work_dir(None) as work, postgres_database(postgres_url, prefix="scalelab_bench") as url:
        figures = ingest.measure(work, url, scale.ingest_runs, scale.ingest_records, ingest.NEW_PER_RUN)
    return ingest.targets(figures, "postgresql")


def _reads(scale: Scale, workers: int, postgres_url: str | None) -> list[Target]:
    with work_dir(None) as work:
        return reads.targets(reads.measure(work, scale.read_runs, scale.read_requests))


def _slurm_or_skip() -> None:
    if not slurm_is_up():
        raise Skipped("the local Slurm is not up (scripts/slurm-local up)")


def _load(scale: Scale, workers: int, postgres_url: str | None) -> list[Target]:
    _slurm_or_skip()
    with work_dir(None) as work:
        return load.targets(load.run_load(work, scale.load_seconds, workers=workers))


def _live_lag(scale: Scale, workers: int, postgres_url: str | None) -> list[Target]:
    # As a centre runs it: the monitor in a process of its own, which readers of the web processes cannot starve.
    with work_dir(None) as work:
        figures = live_lag.measure(
            work, scale.lag_runs, scale.lag_seconds, scale.lag_readers, workers=workers, monitor_apart=True
        )
    return live_lag.targets(figures)


def _monitor_cycle(scale: Scale, workers: int, postgres_url: str | None) -> list[Target]:
    _slurm_or_skip()
    if os.geteuid() != 0:
        raise Skipped("it submits another user's jobs: run as root")
    return monitor_cycle.targets(scale.cycle_live, scale.cycle_others)


Part = Callable[[Scale, int, str | None], list[Target]]
PARTS: dict[str, Part] = {
    "ingest-sqlite": _ingest_sqlite,
    "ingest-postgresql": _ingest_postgres,
    "reads": _reads,
    "load": _load,
    "live-lag": _live_lag,
    "monitor-cycle": _monitor_cycle,
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benches.centre", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a small scale, for trying it (a few minutes)")
    parser.add_argument(
        "--workers",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="server processes for the load and live-lag parts, one of them monitoring (default: one per core)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("SCALELAB_TEST_POSTGRES_URL"),
        help="a PostgreSQL server on which the role may create databases (default: $SCALELAB_TEST_POSTGRES_URL)",
    )
    parser.add_argument("--only", nargs="+", choices=list(PARTS), help="run only these parts")
    return parser


def run_parts(names: Sequence[str], scale: Scale, workers: int, postgres_url: str | None) -> tuple[list[Target], int]:
    """Each part in turn, said as it starts and ends; every figure measured, and how many parts failed."""
    measured: list[Target] = []
    failed = 0
    for name in names:
        print(f"== {name} ({load_average()})", flush=True)
        try:
            rows = PARTS[name](scale, workers, postgres_url)
        except Skipped as why:
            print(f"   skipped: {why}", flush=True)
            continue
        except (BenchError, ServerDidNotStart, load.LoadFailed) as exc:
            print(f"   FAILED: {exc}", flush=True)
            failed += 1
            continue
        measured += rows
        print(f"   {sum(row.met for row in rows)} of {len(rows)} figures met their target", flush=True)
    return measured, failed


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    scale = QUICK if args.quick else FULL
    names = args.only or list(PARTS)
    measured, failed = run_parts(names, scale, args.workers, args.postgres_url)
    at = "a small scale (--quick), not the issue's" if args.quick else "the issue's scale"
    print(f"\nissue 19's targets, at {at}; {load_average()}")
    print(table_of(measured))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
