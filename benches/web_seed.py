"""A database as a busy server holds it, written in bulk: the web benchmark's workload of runs and metric records.

The schema comes from the server's own migrations; the rows are what submission and ingestion would have written
(the history rows of every record, each run's summary folded by ingestion's own apply_record), inserted with one
executemany per table in one transaction instead of one ORM object at a time.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Engine

from benches.web_workload import PlannedExperiment, PlannedRun, Workload, records
from contract.records import METRIC_PREFIX, EndRecord, parse_metric_line
from contract.spec import RunSpec
from contract.states import RunState
from server.db import init_db, make_engine
from server.models import Experiment, Metric, Run, RunSummary, User
from server.services.ingestion.summary import apply_record
from server.services.rundirs import path as run_path

# When the oldest experiment of the workload was made; one more every half hour after it.
EPOCH = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
EXPERIMENT_INTERVAL = timedelta(minutes=30)
METRIC_BATCH = 50_000  # rows per executemany: bounded memory, few round trips
# The records that change a run's summary: ingestion folds only these (a step record changes nothing).
SUMMARY_KINDS = frozenset({"start", "epoch", "end", "resume"})
# The record column holds the JSON the worker printed, as it is: serialising 2,000,000 dicts again would double
# the seeding time for the same text.
INSERT_METRIC = 'INSERT INTO metric (run_id, "offset", kind, epoch, record) VALUES (?, ?, ?, ?, ?)'
SLURM_STATES = {
    RunState.completed: "COMPLETED",
    RunState.failed: "FAILED",
    RunState.cancelled: "CANCELLED",
    RunState.timeout: "TIMEOUT",
    RunState.out_of_memory: "OUT_OF_MEMORY",
    RunState.running: "RUNNING",
    RunState.pending: "PENDING",
}


def metric_line(record: dict[str, Any]) -> str:
    """The line the worker prints for a record (compact JSON after the prefix), without its newline."""
    return f"{METRIC_PREFIX} {json.dumps(record, separators=(',', ':'))}"


def output_of(run: PlannedRun) -> bytes:
    """The run's whole output.log: one line per record."""
    return "".join(metric_line(record) + "\n" for record in records(run)).encode()


@dataclass(frozen=True)
class Seeded:
    experiment_ids: list[str]  # by the workload's experiment index
    run_ids: dict[tuple[int, int], str]  # (experiment index, position) -> run id
    runs: int
    metrics: int
    summaries: int
    seconds: float


def _id(rng_value: int) -> str:
    return f"{rng_value:010x}"


def experiment_created_at(experiment: PlannedExperiment) -> datetime:
    return EPOCH + experiment.index * EXPERIMENT_INTERVAL


def experiment_request(experiment: PlannedExperiment) -> dict[str, Any]:
    """What its submitter would have sent: the shared fields in base, the swept ones in the grid."""
    specs = [run.spec for run in experiment.runs]
    grid = {key: sorted({spec[key] for spec in specs}) for key in ("strategy", "gpus", "global_batch_size", "seed")}
    swept = {key: values for key, values in grid.items() if len(values) > 1}
    base = {key: value for key, value in specs[0].items() if key not in swept}
    return {"name": experiment.name, "base": base, "grid": swept, "resources": {"time_limit": "02:00:00"}}


def _history(run_id: str, planned: PlannedRun) -> tuple[RunSummary, str | None, list[tuple[Any, ...]], int]:
    """The run's summary, its message, its history rows and its output's length, as ingestion would leave them."""
    summary = RunSummary(run_id=run_id)
    message = None
    rows = []
    offset = 0
    for record in records(planned):
        text = json.dumps(record, separators=(",", ":"))
        rows.append((run_id, offset, record["kind"], record.get("epoch"), text))
        offset += len(METRIC_PREFIX) + 1 + len(text.encode()) + 1
        if record["kind"] in SUMMARY_KINDS:
            parsed = parse_metric_line(f"{METRIC_PREFIX} {text}")
            if parsed is None:
                raise ValueError(f"not a metric line: {text[:80]}")
            apply_record(summary, parsed)
            if isinstance(parsed, EndRecord) and parsed.error:
                message = f"the worker reported: {parsed.error}"
    return summary, message, rows, offset


def _run_row(
    run_id: str, job_id: int, planned: PlannedRun, experiment_id: str, created: datetime, runs_dir: Path
) -> dict[str, Any]:
    state = RunState(planned.state)
    started = created + timedelta(minutes=1 + planned.position % 7)
    row = Run(
        id=run_id,
        experiment_id=experiment_id,
        owner=planned.owner,
        position=planned.position,
        state=state,
        job_id=str(job_id),
        scheduler="slurm",
        profile="local",
        attempt=1,
        scheduler_state=SLURM_STATES.get(state),
        scheduler_reason="Priority" if state is RunState.pending else None,
        exit_code=("0:0" if state is RunState.completed else "1:0") if state.is_final else None,
        run_dir=str(run_path(runs_dir, run_id)),
        created_at=created,
        submitted_at=created,
        started_at=started if state is not RunState.pending else None,
        ended_at=started + timedelta(minutes=20) if state.is_final else None,
        spec=RunSpec.model_validate(planned.spec).model_dump(mode="json"),
        # An ended run's output has been read to the end; a live one's is read on as it grows.
        ingest_done=state.is_final,
    )
    return row.model_dump()


def seed(engine: Engine, workload: Workload, runs_dir: Path) -> Seeded:
    """Write the workload into a database brought to the newest schema by init_db; counts and the time it took."""
    import random

    started = time.perf_counter()
    init_db(engine)
    rng = random.Random(workload.seed)  # noqa: S311 (reproducible ids, no secret)
    users = sorted({run.owner for run in workload.runs} | {e.owner for e in workload.experiments})
    experiment_ids = [_id(rng.getrandbits(40)) for _ in workload.experiments]
    run_ids = {(run.experiment, run.position): _id(rng.getrandbits(40)) for run in workload.runs}
    with engine.begin() as connection:
        connection.execute(insert(User), [User(name=name, created_at=EPOCH).model_dump() for name in users])
        connection.execute(
            insert(Experiment),
            [
                Experiment(
                    id=experiment_ids[e.index],
                    name=e.name,
                    owner=e.owner,
                    created_at=experiment_created_at(e),
                    request=experiment_request(e),
                ).model_dump()
                for e in workload.experiments
            ],
        )
        # The history rows go in as they are made, before the runs they point at: foreign keys are checked at
        # the commit, so that no run's 200 rows need to be held until all runs are written.
        connection.exec_driver_sql("PRAGMA defer_foreign_keys=ON")
        run_rows, summaries = [], []
        batch: list[tuple[Any, ...]] = []
        for job_id, planned in enumerate(workload.runs, start=1000):
            experiment = workload.experiments[planned.experiment]
            run_id = run_ids[(planned.experiment, planned.position)]
            summary, message, metrics, length = _history(run_id, planned)
            row = _run_row(run_id, job_id, planned, experiment_ids[experiment.index], experiment_created_at(experiment),
                           runs_dir)  # fmt: skip
            row.update(message=message, log_offset=length)
            run_rows.append(row)
            if metrics:
                summaries.append(summary.model_dump())
            batch += metrics
            if len(batch) >= METRIC_BATCH:
                connection.exec_driver_sql(INSERT_METRIC, batch)
                batch = []
        if batch:
            connection.exec_driver_sql(INSERT_METRIC, batch)
        connection.execute(insert(Run), run_rows)
        connection.execute(insert(RunSummary), summaries)
    counts = counted(engine)
    return Seeded(experiment_ids, run_ids, counts["run"], counts["metric"], counts["runsummary"],
                  time.perf_counter() - started)  # fmt: skip


def counted(engine: Engine) -> dict[str, int]:
    """Rows in the tables the workload fills."""
    with engine.connect() as connection:
        tables = {"experiment": Experiment, "run": Run, "metric": Metric, "runsummary": RunSummary, "user": User}
        return {
            name: connection.execute(select(func.count()).select_from(table)).scalar_one()
            for name, table in tables.items()
        }


def seeded_database(path: Path, workload: Workload) -> tuple[Engine, Seeded]:
    """A new SQLite database at `path` (the server's engine settings: WAL), seeded with the workload."""
    engine = make_engine(f"sqlite:///{path}")
    return engine, seed(engine, workload, path.parent / "runs")
