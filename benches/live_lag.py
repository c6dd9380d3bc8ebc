"""Live lag: how long after a job prints a record the API returns it, with many runs printing while readers load
the server.

A real server (`python -m server`, its monitor polling every second) on a database holding `--runs` running runs
(500); this process appends one step record to each run's output.log 20 times a second, as 500 workers printing at
once would, for `--seconds` (120), while the load benchmark's readers (benches.load: runs lists, runs, pages,
comparisons, metrics) send requests. Two lags per record, for a sample of runs:
- stored: from the line's write to the moment the run's stored offset has passed it (read from the database);
- returned: from the line's write to the moment a client of the API, polling the run's step records, received it.
Afterwards every line written is checked to be stored exactly once. The runs belong to a scheduler the server does
not use, so that it follows them only by their output (the scheduler's side is the monitor-cycle benchmark's).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select
from sqlmodel import col

from benches.common import BenchError, load_average, work_dir
from benches.http_client import Connection
from benches.ingest import live_runs
from benches.load import READERS, Tally, _reader, make_users, percentile
from benches.server_process import ServerDidNotStart, running_server
from benches.targets import Target, server_processes, table_of
from contract.records import StartRecord, StepRecord, format_record
from contract.rundir import OUTPUT_FILE
from server.db import make_engine
from server.models import Metric, Run

RUNS = 500
RECORDS_PER_S = 20
SECONDS = 120.0
SAMPLED_RUNS = 20
TARGET_LAG_S = 2.0
POLL_INTERVAL_S = 1.0  # the default of 2 s alone would make a p95 under 2 s impossible
DRAIN_TIMEOUT_S = 120.0


@dataclass
class Written:
    """Per run, the end offset of each line written and when its write began (the lag's start)."""

    ends: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def written_at(self, offset: int) -> float | None:
        """When the last line that ends at or before `offset` was written."""
        index = bisect.bisect_right(self.ends, offset) - 1
        return self.times[index] if index >= 0 else None


@dataclass
class Lags:
    stored: list[float] = field(default_factory=list)
    returned: list[float] = field(default_factory=list)


def _write_lines(
    files: list[Path], written: dict[int, Written], seconds: float, rate: int, stop: threading.Event
) -> int:
    """Append one step record to every run's output `rate` times a second; the lines written per run."""
    handles = [path.open("ab", buffering=0) for path in files]
    sizes = [path.stat().st_size for path in files]
    tick, started = 0, time.monotonic()
    try:
        while tick < seconds * rate and not stop.is_set():
            time.sleep(max(0.0, started + tick / rate - time.monotonic()))
            tick += 1
            line = (format_record(StepRecord(epoch=1, step=tick, train_loss=1.0 / tick)) + "\n").encode()
            at = time.monotonic()
            for index, handle in enumerate(handles):
                handle.write(line)
                sizes[index] += len(line)
                if index in written:
                    written[index].ends.append(sizes[index])
                    written[index].times.append(at)
    finally:
        for handle in handles:
            handle.close()
    return tick


def _watch_offsets(database_url: str, run_ids: dict[int, str], written: dict[int, Written], lags: Lags,
                   stop: threading.Event) -> None:  # fmt: skip
    """Every 50 ms, how far ingestion has stored each sampled run: the stored lag of each line it passed."""
    engine = make_engine(database_url)
    seen = dict.fromkeys(run_ids, 0)
    index_of = {run_id: index for index, run_id in run_ids.items()}
    query = select(col(Run.id), col(Run.log_offset)).where(col(Run.id).in_(list(run_ids.values())))
    try:
        while not stop.is_set():
            with engine.connect() as connection:
                found = connection.execute(query).all()
            now = time.monotonic()
            for run_id, offset in found:
                index = index_of[run_id]
                ends, times = written[index].ends, written[index].times
                first, last = bisect.bisect_right(ends, seen[index]), bisect.bisect_right(ends, offset)
                lags.stored.extend(now - at for at in times[first:last])
                seen[index] = max(seen[index], offset)
            time.sleep(0.05)
    finally:
        engine.dispose()


async def _poll_api(url: str, token: str, run_id: str, written: Written, lags: Lags, stop_at: float) -> None:
    """Ask for the run's step records after those already seen, again and again: the returned lag of each."""
    seen = 0
    headers = {"Authorization": f"Bearer {token}"}
    async with Connection(url, 300, headers) as client:
        while time.monotonic() < stop_at:
            response = await client.get(f"/api/runs/{run_id}/metrics", params={"kind": "step", "skip": seen})
            now = time.monotonic()
            if response.status_code != 200:
                raise BenchError(f"GET metrics of {run_id} answered {response.status_code}: {response.text[:200]}")
            records = response.json()["data"]
            for record in records:
                step = record["step"]
                if step <= len(written.times):
                    lags.returned.append(now - written.times[step - 1])
            seen += len(records)
            await asyncio.sleep(0.05)


async def _clients(url: str, token: str, run_ids: dict[int, str], experiment_ids: list[str],
                   written: dict[int, Written], lags: Lags, seconds: float, readers: int) -> Tally:  # fmt: skip
    tally = Tally()
    tally.run_ids = list(run_ids.values())
    tally.experiments = experiment_ids
    stop_at = time.monotonic() + seconds
    tasks = [_reader(url, token, index, stop_at, tally) for index in range(readers)]
    tasks += [_poll_api(url, token, run_ids[index], written[index], lags, stop_at) for index in written]
    await asyncio.gather(*tasks)
    return tally


@dataclass(frozen=True)
class Figures:
    runs: int
    seconds: float
    lines: int
    stored_p95_s: float
    returned_p95_s: float
    samples: int
    read_p95_s: float
    reads: int
    lost: int
    duplicated: int
    readers: int
    poll_interval_s: float
    workers: int = 1
    monitor_apart: bool = False


def measure(
    work: Path,
    runs: int,
    seconds: float,
    readers: int,
    poll_interval_s: float = POLL_INTERVAL_S,
    rate: int = RECORDS_PER_S,
    workers: int = 1,
    monitor_apart: bool = False,
) -> Figures:
    database = work / "scalelab.db"
    _, token = make_users(f"sqlite:///{database}", 0)  # the readers' user (the database made on the way)
    engine = make_engine(f"sqlite:///{database}")
    files = [work / "runs" / f"live{index:05d}" / OUTPUT_FILE for index in range(runs)]
    start = format_record(StartRecord(world_size=1, nodes=1, strategy="single")) + "\n"
    for path in files:
        path.parent.mkdir(parents=True)
        path.write_text(start)
    # Another scheduler's runs: the server (scheduler "local") reads their output but never polls their jobs.
    # In experiments of two runs, as the load benchmark's clients submit them, which its readers compare.
    ids = live_runs(engine, [path.parent for path in files], scheduler="slurm", per_experiment=2)
    with engine.connect() as connection:
        experiment_ids = list(connection.execute(select(col(Run.experiment_id)).distinct()).scalars())
    sampled = range(0, runs, max(runs // SAMPLED_RUNS, 1))
    written = {index: Written() for index in sampled}
    run_ids = {index: ids[index] for index in range(runs)}
    lags = Lags()
    stop = threading.Event()
    env = {"SCALELAB_POLL_INTERVAL_S": str(poll_interval_s)}
    with running_server(work, "local", env, args=["--workers", str(workers)], monitor_apart=monitor_apart) as url:
        writer_lines: list[int] = []
        writer = threading.Thread(
            target=lambda: writer_lines.append(_write_lines(files, written, seconds, rate, stop)), daemon=True
        )
        watcher = threading.Thread(
            target=_watch_offsets,
            args=(f"sqlite:///{database}", {i: run_ids[i] for i in written}, written, lags, stop),
            daemon=True,
        )
        watcher.start()
        writer.start()
        try:
            tally = asyncio.run(_clients(url, token, run_ids, experiment_ids, written, lags, seconds, readers))
        finally:
            writer.join()
        lines = writer_lines[0] if writer_lines else 0
        size = len(start.encode()) + sum(
            len((format_record(StepRecord(epoch=1, step=tick, train_loss=1.0 / tick)) + "\n").encode())
            for tick in range(1, lines + 1)
        )
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        with engine.connect() as connection:
            while connection.execute(select(func.count()).where(col(Run.log_offset) < size)).scalar_one():
                if time.monotonic() > deadline:
                    raise BenchError(f"the server did not read every run to its end within {DRAIN_TIMEOUT_S:.0f} s")
                time.sleep(0.5)
                connection.rollback()  # a new snapshot: SQLite's read transaction would see the old one
        stop.set()
        watcher.join()
    with engine.connect() as connection:
        stored = connection.execute(select(func.count()).select_from(Metric)).scalar_one()
        distinct = connection.execute(
            select(func.count()).select_from(select(col(Metric.run_id), col(Metric.offset)).distinct().subquery())
        ).scalar_one()
    engine.dispose()
    expected = runs * (lines + 1)
    reads = [latency for latencies in tally.latencies.values() for latency in latencies]
    if not lags.stored or not lags.returned:
        raise BenchError("no lag was measured: the run was too short, or nothing was ingested")
    return Figures(
        runs=runs, seconds=seconds, lines=lines, stored_p95_s=percentile(lags.stored, 95),
        returned_p95_s=percentile(lags.returned, 95), samples=len(lags.returned),
        read_p95_s=percentile(reads, 95) if reads else 0.0, reads=len(reads),
        lost=max(expected - distinct, 0), duplicated=stored - distinct, readers=readers,
        poll_interval_s=poll_interval_s, workers=workers, monitor_apart=monitor_apart,
    )  # fmt: skip


def targets(figures: Figures) -> list[Target]:
    scale = f"{figures.runs} runs x {RECORDS_PER_S}/s for {figures.seconds:.0f} s, {figures.readers} readers"
    return [
        Target("live lag p95, line written -> returned by the API", "s", None, figures.returned_p95_s, TARGET_LAG_S,
               False, f"{scale}; poll interval {figures.poll_interval_s:g} s, {server_processes(figures.workers)}"
               + (", the monitor in a process of its own" if figures.monitor_apart else "")),
        Target("live lag p95, line written -> stored", "s", None, figures.stored_p95_s, TARGET_LAG_S, False,
               "ingestion's share of the lag"),
        Target("live lag: records lost or stored twice", "records", None, figures.lost + figures.duplicated, 0, False,
               f"{figures.runs * (figures.lines + 1):,} written"),
        Target("live lag: p95 of the readers' requests meanwhile", "s", None, figures.read_p95_s, 1.0, False,
               f"{figures.reads:,} requests; the reads' own target"),
    ]  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benches.live_lag", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=RUNS, help="running runs printing (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=SECONDS, help="how long they print (default %(default)s)")
    parser.add_argument("--readers", type=int, default=READERS, help="reading clients (default %(default)s)")
    parser.add_argument(
        "--poll-interval", type=float, default=POLL_INTERVAL_S, help="the monitor's (default %(default)s s)"
    )
    parser.add_argument("--workers", type=int, default=1, help="server processes, one of them monitoring (default 1)")
    parser.add_argument(
        "--monitor-apart",
        action="store_true",
        help="the monitor in a process of its own (`python -m server monitor`, SCALELAB_MONITOR_IN_WEB=false), "
        "the web processes only serving",
    )
    parser.add_argument("--tmp", type=Path, help="where to put the database and the run directories (kept)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    print(f"live lag ({load_average()})", flush=True)
    try:
        with work_dir(args.tmp) as work:
            figures = measure(work, args.runs, args.seconds, args.readers, args.poll_interval, workers=args.workers,
                              monitor_apart=args.monitor_apart)  # fmt: skip
    except (BenchError, ServerDidNotStart) as exc:
        print(f"benches.live_lag: {exc}", file=sys.stderr)
        return 1
    print(f"{figures.samples:,} records timed through the API ({load_average()})")
    print(table_of(targets(figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
