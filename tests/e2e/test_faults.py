"""Faults on a real server process: killed with SIGKILL while it ingests a large backlog of metric lines."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import httpx
from sqlalchemy import func
from sqlmodel import Session, col, select

from benches.server_process import running_server
from contract.records import EndRecord, EpochRecord, StartRecord, format_record
from contract.rundir import OUTPUT_FILE
from contract.states import RunState
from server.db import init_db, make_engine
from server.models import Metric, Run
from tests.e2e.test_lifecycle import wait_until
from tests.factories import experiment_row, run_row

# About 14 MB of records: several of ingestion's 4 MB chunks, each committed on its own, so a kill lands between
# two commits, with some of the backlog stored and some not.
BACKLOG_EPOCHS = 100_000


def write_backlog(run_dir: Path, epochs: int) -> int:
    """A finished run's output as the worker prints it, with progress lines between the records; its lines."""
    start = StartRecord(
        world_size=1, nodes=1, device="cpu", backend="gloo", strategy="single", torch_version="2", hostname="h"
    )
    lines = [format_record(start)]
    for epoch in range(1, epochs + 1):
        lines.append(f"epoch {epoch}/{epochs}")
        record = EpochRecord(
            epoch=epoch, train_loss=1 / epoch, val_loss=2 / epoch, val_accuracy=0.5, epoch_time_s=0.1,
            samples_per_s=100.0,
        )  # fmt: skip
        lines.append(format_record(record))
    lines.append(format_record(EndRecord(status="completed", total_time_s=float(epochs))))
    run_dir.mkdir(parents=True)
    (run_dir / OUTPUT_FILE).write_text("\n".join(lines) + "\n")
    return len(lines)


def stored(engine) -> tuple[int, bool]:
    with Session(engine) as session:
        count = session.exec(select(func.count()).select_from(Metric)).one()
        done = session.exec(select(Run.ingest_done)).one()
    return count, done


def test_a_server_killed_while_ingesting_a_backlog_stores_each_record_once(tmp_path, database_url):
    """A run that ended while the server was down leaves a large output to read; the server is killed with
    SIGKILL partway through it, started again, and reads on from its last committed offset."""
    engine = make_engine(database_url)
    init_db(engine)
    with Session(engine) as session:
        run = run_row(
            session, experiment_row(session), tmp_path / "runs" / "backlog", state=RunState.completed, scheduler="local"
        )
        run_id = run.id
    write_backlog(Path(run.run_dir), BACKLOG_EPOCHS)
    expected = BACKLOG_EPOCHS + 2  # start, the epochs, end

    log = tmp_path / "server.log"
    env = {"SCALELAB_DATABASE_URL": database_url}
    with running_server(tmp_path, "local", env) as url:
        # Killed as soon as the first chunk is committed, well before the last (each takes seconds here).
        wait_until("a first chunk was stored", lambda: stored(engine)[0] > 0, log=log)
        pid = int(re.findall(r"Started server process \[(\d+)\]", log.read_text())[-1])
        os.kill(pid, signal.SIGKILL)
        at_kill, done_at_kill = stored(engine)
    assert not done_at_kill and 0 < at_kill < expected, (at_kill, expected)

    restarted = time.monotonic()
    with running_server(tmp_path, "local", env) as url:
        wait_until("the backlog was read to its end", lambda: stored(engine)[1], timeout_s=600, log=log)
        recovery_s = time.monotonic() - restarted
        run_public = httpx.get(f"{url}/api/runs/{run_id}", timeout=30).json()
        lag = httpx.get(f"{url}/metrics", timeout=30).text
    assert_each_record_once(engine, run_id, expected, BACKLOG_EPOCHS)
    assert run_public["parse_errors"] == 0
    assert "scalelab_ingest_lag_bytes 0\n" in lag
    print(  # noqa: T201 - the figures for the fault report
        f"\nkill -9 during ingestion: {at_kill} of {expected} records stored at the kill, {expected} after the "
        f"restart, each once; the restarted server read the rest in {recovery_s:.1f} s"
    )
    engine.dispose()


def assert_each_record_once(engine, run_id: str, expected: int, epochs: int) -> None:
    """The run's records are all stored, none twice, its epochs in order."""
    with Session(engine) as session:
        offsets = session.exec(select(Metric.offset).where(Metric.run_id == run_id)).all()
        stored_epochs = session.exec(
            select(Metric.epoch).where(Metric.run_id == run_id, Metric.kind == "epoch").order_by(col(Metric.offset))
        ).all()
    assert len(offsets) == expected and len(set(offsets)) == expected  # none lost, none twice
    assert stored_epochs == list(range(1, epochs + 1))
