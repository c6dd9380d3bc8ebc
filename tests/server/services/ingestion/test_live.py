"""Live runs read many per transaction: a crash in the middle of a batch, or a run whose records cannot be stored,
still leaves every record stored exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import func, update
from sqlmodel import Session, col, select

from contract.records import StepRecord, format_record
from contract.rundir import OUTPUT_FILE
from contract.states import RunState
from server.models import Metric, Run, RunSummary
from server.monitor import Monitor
from server.services.ingestion import live
from tests.factories import experiment_row, run_row
from tests.server.services.ingestion.output import START, epoch_line

REPO = Path(__file__).resolve().parents[4]
EPOCHS = 3
STEPS_PER_EPOCH = 5

# A monitor's ingestion in its own process, killed with SIGKILL right after its Nth write of a run's records has
# run: inside a batch's transaction, with that batch's earlier runs written and its commit not yet made. (The moment
# is chosen by wrapping the write, which is an INSERT on SQLite and a COPY on PostgreSQL; the kill is real.)
KILLED_MID_BATCH = """
import os, signal, sys
from server.db import make_engine
from server.monitor import Monitor
from server.services.ingestion import live, storing

url, batch_runs, kill_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
live.BATCH_RUNS = batch_runs
engine = make_engine(url)
written = 0
write = storing._RECORDS.insert

def write_then_die(connection, rows):
    global written
    write(connection, rows)
    written += 1
    if written == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)

storing._RECORDS.insert = write_then_die
Monitor(engine, None, 1.0).ingest_metrics()  # ingestion never asks the scheduler
"""


def output() -> str:
    lines = [START]
    step = 0
    for epoch in range(1, EPOCHS + 1):
        for _ in range(STEPS_PER_EPOCH):
            step += 1
            lines.append(format_record(StepRecord(epoch=epoch, step=step, train_loss=1.0 / step)))
        lines.append(epoch_line(epoch))
    return "\n".join(lines) + "\n"


LINES = 1 + EPOCHS * (STEPS_PER_EPOCH + 1)


def live_runs(session: Session, tmp_path: Path, count: int) -> list[Run]:
    experiment = experiment_row(session)
    runs = []
    for position in range(count):
        run = run_row(session, experiment, tmp_path / f"run{position}", state=RunState.running, position=position)
        Path(run.run_dir).mkdir(parents=True)
        (Path(run.run_dir) / OUTPUT_FILE).write_text(output())
        runs.append(run)
    return runs


def stored_per_run(engine) -> dict[str, tuple[int, int]]:
    """Records and distinct offsets stored, by run."""
    with Session(engine) as session:
        rows = session.exec(
            select(Metric.run_id, func.count(), func.count(func.distinct(Metric.offset))).group_by(Metric.run_id)
        ).all()
    return {run_id: (count, distinct) for run_id, count, distinct in rows}


def assert_each_record_once(engine, runs: list[Run]) -> None:
    assert stored_per_run(engine) == {run.id: (LINES, LINES) for run in runs}
    size = len(output().encode())
    with Session(engine) as session:
        assert set(session.exec(select(Run.log_offset)).all()) == {size}
        assert set(session.exec(select(RunSummary.epochs_done)).all()) == {EPOCHS}
        assert len(session.exec(select(RunSummary.run_id)).all()) == len(runs)


def test_a_monitor_killed_in_the_middle_of_a_batch_stores_every_record_once(
    engine, session, settings, tmp_path, local_scheduler
):
    """Batches of 3 runs; killed after the 5th run's write (the second batch's second, or on PostgreSQL, whose
    batches are stored two at a time, whichever came fifth): every run is stored whole with its offset or not at
    all, on SQLite the first batch only, and the next monitor stores the rest, nothing twice."""
    runs = live_runs(session, tmp_path, 8)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MID_BATCH, settings.database_url, "3", "5"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr

    at_kill = stored_per_run(engine)
    assert set(at_kill.values()) <= {(LINES, LINES)}, at_kill  # each run whole, or not at all
    with Session(engine) as fresh:
        offsets = dict(fresh.exec(select(Run.id, Run.log_offset)).all())
    assert {run_id for run_id, offset in offsets.items() if offset > 0} == set(at_kill)  # with its offset
    assert len(at_kill) < len(runs)  # the kill came before the end
    if engine.dialect.name == "sqlite":
        assert len(at_kill) == 3  # the first batch, whose commit came before the second batch's writes

    Monitor(engine, local_scheduler, 1.0).ingest_metrics()
    assert_each_record_once(engine, runs)


def test_a_run_whose_records_cannot_be_stored_holds_back_no_other(engine, session, tmp_path, local_scheduler):
    """One run's offset was lost (set back to 0) after its records were stored: storing them again is refused by
    the unique (run_id, offset) key, and the runs in its batch are stored all the same."""
    runs = live_runs(session, tmp_path, 4)
    monitor = Monitor(engine, local_scheduler, 1.0)
    monitor.ingest_metrics()
    assert_each_record_once(engine, runs)

    broken = runs[1]
    with Session(engine) as writer:
        writer.exec(update(Run).where(col(Run.id) == broken.id).values(log_offset=0))
        writer.commit()
    for run in runs:
        with (Path(run.run_dir) / OUTPUT_FILE).open("a") as handle:
            handle.write(format_record(StepRecord(epoch=EPOCHS, step=99, train_loss=0.5)) + "\n")
    monitor.ingest_metrics()

    stored = stored_per_run(engine)
    assert stored.pop(broken.id) == (LINES, LINES)  # nothing of it twice, and nothing new
    assert stored == {run.id: (LINES + 1, LINES + 1) for run in runs if run is not broken}
    with Session(engine) as fresh:
        # Read again next cycle, refused again: never counted twice.
        assert fresh.exec(select(Run.log_offset).where(Run.id == broken.id)).one() == 0
        assert fresh.exec(select(RunSummary.epochs_done).where(RunSummary.run_id == broken.id)).one() == EPOCHS


def test_batches_bound_the_bytes_and_runs_of_a_transaction(monkeypatch):
    monkeypatch.setattr(live, "BATCH_BYTES", 100)
    monkeypatch.setattr(live, "BATCH_RUNS", 3)
    runs = {"a": (0, 60), "b": (10, 50), "c": (0, 10), "d": (0, 10), "e": (0, 10), "f": (0, 500)}
    assert list(live._batches(runs)) == [["a", "b"], ["c", "d", "e"], ["f"]]
