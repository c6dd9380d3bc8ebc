"""Ingestion throughput through the monitor's own path: many runs' output files read and stored exactly once.

1. Backlog: live runs whose output is already written (as after a burst of printing or a server restart): each
   run's `output.log` holds a start record, then per epoch its step records, each rank's memory and timing records
   and the epoch record, as the worker prints them. One `Monitor.ingest_metrics()` reads them all, in-process, as
   the server's monitor thread does; the figure is records stored per second of wall time, and per second of this
   process's CPU time (the database's work included for SQLite, which runs in-process; for PostgreSQL the
   database server's own CPU is not counted). Afterwards every record is checked to be stored once.
2. Live cycle: then each run prints 40 more step records (2 s of the live-lag benchmark's 20 records/s) and one
   monitor cycle reads them: its CPU time, which must stay well under the poll interval for the lag to stay low.

The live-lag benchmark (`python -m benches.live_lag`) measures the same path in a server under a read load.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Engine, make_url
from sqlmodel import col

from benches.common import BenchError, NoScheduler, load_average, work_dir
from benches.targets import Target, table_of
from contract.records import EpochRecord, MemoryRecord, StartRecord, StepRecord, TimingRecord, format_record
from contract.rundir import OUTPUT_FILE
from contract.spec import RunSpec
from contract.states import RunState
from server.db import init_db, make_engine
from server.models import Experiment, Metric, Run
from server.monitor import Monitor

# Issue 19: about 15,000 records/s through the monitor's path on the old main (200 runs' worth, in-process).
BASELINE_RECORDS_PER_S = 15_000.0
TARGET_RECORDS_PER_S = 100_000.0
FULL_RUNS = 500
FULL_RECORDS_PER_RUN = 2_000
# The live cycle: the records each run prints between two cycles in the live-lag benchmark (20/s, 2 s apart).
NEW_PER_RUN = 40
CYCLE_CPU_BOUND_S = 0.5
STEPS_PER_EPOCH = 100
RANKS = 2


def output_lines(records: int, first_step: int = 1) -> list[str]:
    """`records` lines as the worker prints them: a start, then each epoch's steps, per-rank memory and timing
    records and the epoch record, cut after `records` lines."""
    start = StartRecord(world_size=RANKS, nodes=1, device="cpu", backend="gloo", strategy="ddp", torch_version="2")
    lines = [format_record(start)]
    step, epoch = first_step, 1
    while len(lines) < records:
        for _ in range(STEPS_PER_EPOCH):
            lines.append(format_record(StepRecord(epoch=epoch, step=step, train_loss=2.3 / (1 + step / 100))))
            step += 1
        for rank in range(RANKS):
            lines.append(
                format_record(
                    MemoryRecord(epoch=epoch, rank=rank, peak_allocated_bytes=2**28 + rank, memory_kind="cpu_max_rss")
                )
            )
            lines.append(
                format_record(
                    TimingRecord(
                        epoch=epoch,
                        rank=rank,
                        steps=STEPS_PER_EPOCH,
                        step_s=0.1,
                        data_s=0.01,
                        compute_s=0.07,
                        optimizer_s=0.01,
                        comm_s=0.01,
                        method="bench",
                    )
                )
            )
        lines.append(
            format_record(
                EpochRecord(
                    epoch=epoch,
                    train_loss=1.0 / epoch,
                    val_loss=1.1 / epoch,
                    val_accuracy=0.9,
                    epoch_time_s=10.0,
                    samples_per_s=5000.0,
                    peak_memory_bytes=2**28,
                )
            )
        )
        epoch += 1
    return lines[:records]


def live_runs(
    engine: Engine, run_dirs: Sequence[Path], scheduler: str = NoScheduler.name, per_experiment: int | None = None
) -> list[str]:
    """A running run per directory, as submission leaves them, in experiments of `per_experiment` runs (default:
    one experiment for all); their ids."""
    spec = RunSpec.model_validate({"model": "mlp", "dataset": "synthetic", "strategy": "ddp", "gpus": RANKS})
    size = per_experiment or max(len(run_dirs), 1)
    experiments = [
        Experiment(name=f"ingestion benchmark {index}", request={"name": f"ingestion benchmark {index}"})
        for index in range(0, len(run_dirs), size)
    ]
    runs = [
        Run(
            experiment_id=experiments[position // size].id,
            position=position % size,
            scheduler=scheduler,
            state=RunState.running,
            job_id=str(1000 + position),
            spec=spec.model_dump(mode="json"),
            run_dir=str(run_dir),
        )
        for position, run_dir in enumerate(run_dirs)
    ]
    with engine.begin() as connection:
        connection.execute(insert(Experiment), [experiment.model_dump() for experiment in experiments])
        connection.execute(insert(Run), [run.model_dump() for run in runs])
    return [run.id for run in runs]


@dataclass(frozen=True)
class Throughput:
    records: int
    runs: int
    wall_s: float
    cpu_s: float

    @property
    def per_wall_s(self) -> float:
        return self.records / self.wall_s

    @property
    def per_cpu_s(self) -> float:
        return self.records / self.cpu_s


@dataclass(frozen=True)
class Figures:
    backlog: Throughput
    cycle: Throughput  # one monitor cycle over every live run's few new records


def _ingested(monitor: Monitor) -> Throughput:
    """Time one read of every run's new lines, on the wall clock and this process's CPU clock."""
    wall, cpu = time.perf_counter(), time.process_time()
    monitor.ingest_metrics()
    return Throughput(0, 0, time.perf_counter() - wall, time.process_time() - cpu)


def _check_stored(engine: Engine, runs: int, records_per_run: int, size: int) -> None:
    """Every record stored once, and every run read to the end of its output."""
    with engine.connect() as connection:
        stored = connection.execute(select(func.count()).select_from(Metric)).scalar_one()
        distinct = connection.execute(
            select(func.count()).select_from(select(col(Metric.run_id), col(Metric.offset)).distinct().subquery())
        ).scalar_one()
        unread = connection.execute(select(func.count()).where(col(Run.log_offset) != size)).scalar_one()
    expected = runs * records_per_run
    if (stored, distinct, unread) != (expected, expected, 0):
        raise BenchError(f"stored {stored} records ({distinct} distinct) of {expected}; {unread} runs unread")


def measure(work: Path, database_url: str | None, runs: int, records_per_run: int, new_per_run: int) -> Figures:
    """Write the runs' output and time the monitor's ingestion of all of it; then of a few new records per run."""
    engine = make_engine(database_url or f"sqlite:///{work / 'scalelab.db'}")
    try:
        init_db(engine)
        run_dirs = [work / "runs" / f"run{index:05d}" for index in range(runs)]
        text = ("\n".join(output_lines(records_per_run)) + "\n").encode()
        for run_dir in run_dirs:
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / OUTPUT_FILE).write_bytes(text)
        live_runs(engine, run_dirs)
        monitor = Monitor(engine, NoScheduler(), 1.0)
        backlog = _ingested(monitor)
        _check_stored(engine, runs, records_per_run, len(text))
        steps = [StepRecord(epoch=1, step=records_per_run + i, train_loss=0.5) for i in range(new_per_run)]
        more = "".join(format_record(step) + "\n" for step in steps).encode()
        for run_dir in run_dirs:
            with (run_dir / OUTPUT_FILE).open("ab") as handle:
                handle.write(more)
        cycle = _ingested(monitor)
        _check_stored(engine, runs, records_per_run + new_per_run, len(text) + len(more))
    finally:
        engine.dispose()
    return Figures(
        Throughput(runs * records_per_run, runs, backlog.wall_s, backlog.cpu_s),
        Throughput(runs * new_per_run, runs, cycle.wall_s, cycle.cpu_s),
    )


def targets(figures: Figures, database: str = "sqlite") -> list[Target]:
    backlog, cycle = figures.backlog, figures.cycle
    scale = f"{backlog.runs} runs x {backlog.records // backlog.runs:,} records"
    server_cpu = "" if database == "sqlite" else "; the database server's CPU not counted"
    return [
        Target(
            f"ingestion, monitor's path, {database}", "records/s", BASELINE_RECORDS_PER_S, backlog.per_wall_s,
            TARGET_RECORDS_PER_S, True, f"{scale}; wall time on a shared machine",
        ),
        Target(
            f"ingestion, monitor's path, {database}, per CPU second", "records/s", None, backlog.per_cpu_s,
            TARGET_RECORDS_PER_S, True, f"the same, over this process's CPU time{server_cpu}",
        ),
        Target(
            f"monitor cycle, {cycle.runs} live runs x {cycle.records // cycle.runs} new records, {database}",
            "ms CPU", None, cycle.cpu_s * 1000, CYCLE_CPU_BOUND_S * 1000, False,
            "under the poll interval (1 s), so that the live lag can stay under 2 s",
        ),
    ]  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benches.ingest", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=FULL_RUNS, help="live runs (default %(default)s)")
    parser.add_argument(
        "--records", type=int, default=FULL_RECORDS_PER_RUN, help="backlog records per run (default %(default)s)"
    )
    parser.add_argument("--new", type=int, default=NEW_PER_RUN, help="new records per run in the live cycle")
    parser.add_argument(
        "--database-url",
        help="an empty database to measure instead of a new SQLite file (the migrations make its tables)",
    )
    parser.add_argument("--tmp", type=Path, help="where to put the database and the run directories (kept)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    database = "sqlite" if args.database_url is None else make_url(args.database_url).get_backend_name()
    print(f"ingestion through the monitor's path ({load_average()})", flush=True)
    try:
        with work_dir(args.tmp) as work:
            figures = measure(work, args.database_url, args.runs, args.records, args.new)
    except BenchError as exc:
        print(f"benches.ingest: {exc}", file=sys.stderr)
        return 1
    backlog = figures.backlog
    print(f"{backlog.records:,} records in {backlog.wall_s:.2f} s wall, {backlog.cpu_s:.2f} s CPU ({load_average()})")
    print(table_of(targets(figures, database)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
