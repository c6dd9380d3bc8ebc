"""A job's output.log that is not an honest file: a FIFO, a link to a device or to another run's output, truncated or
replaced. Ingestion never hangs on it, never reads another file's bytes as the run's, and stops reading it once, with
a message and an event on the run; the other runs are read on. Real FIFOs, links and files; the monitor's own entry
point."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from contract.rundir import OUTPUT_FILE
from contract.states import RunState
from server.models import Run, RunEvent
from server.services.ingestion import ingest_runs
from tests.factories import experiment_row, run_row
from tests.server.services.ingestion.output import START, append, epoch_line, stored

# Generous: a cycle of a few runs takes milliseconds; one that hangs never ends.
HANG_S = 60


def cycle_within_bound(engine: Engine) -> None:
    """One ingestion cycle, in a thread: fail (not hang) if it does not end."""
    failures: list[BaseException] = []

    def work() -> None:
        try:
            ingest_runs(engine, lambda run_id: None)
        except BaseException as exc:  # reported by the test, whatever it is
            failures.append(exc)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(HANG_S)
    assert not worker.is_alive(), "an ingestion cycle hangs"
    assert not failures, failures


@contextlib.contextmanager
def released(fifo: Path) -> Iterator[None]:
    """Whatever happens in the test, a reader blocked on the FIFO (code that opens it blocking) is let go."""
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))


def made_run(session: Session, tmp_path: Path, name: str, state: RunState = RunState.running, **overrides) -> Run:
    run_dir = tmp_path / "runs" / name
    run_dir.mkdir(parents=True)
    experiment = experiment_row(session)
    return run_row(session, experiment, run_dir, state=state, scheduler="local", **overrides)


def refusals(session: Session, run: Run) -> list[str | None]:
    found = session.exec(select(RunEvent).where(RunEvent.run_id == run.id).order_by(col(RunEvent.id))).all()
    return [found_event.detail for found_event in found if found_event.kind == "output_refused"]


@pytest.mark.parametrize("state", [RunState.running, RunState.completed])
def test_a_fifo_as_output_neither_hangs_ingestion_nor_stops_the_other_runs(engine, session, tmp_path, state):
    hostile = made_run(session, tmp_path, "fifo", state)
    honest = made_run(session, tmp_path, "honest")
    fifo = Path(hostile.run_dir) / OUTPUT_FILE
    os.mkfifo(fifo)
    append(honest, f"{START}\n{epoch_line(1)}\n")
    with released(fifo):
        cycle_within_bound(engine)
        cycle_within_bound(engine)
    session.refresh(hostile)
    assert [m.kind for m in stored(session, honest)] == ["start", "epoch"]
    assert refusals(session, hostile) == [f"{OUTPUT_FILE} of this run is not a file in its directory: it is a FIFO"]
    assert "FIFO" in (hostile.message or "")
    assert hostile.ingest_done is state.is_final


def test_a_link_to_a_device_is_refused_not_read_forever(engine, session, tmp_path):
    run = made_run(session, tmp_path, "zero", RunState.completed)
    (Path(run.run_dir) / OUTPUT_FILE).symlink_to("/dev/zero")
    cycle_within_bound(engine)
    session.refresh(run)
    assert (run.log_offset, run.ingest_done) == (0, True)
    assert refusals(session, run) == [f"{OUTPUT_FILE} of this run is not a file in its directory: it is a link"]


def test_a_link_to_another_runs_output_copies_none_of_its_records(engine, session, tmp_path):
    theirs = made_run(session, tmp_path, "theirs")
    append(theirs, f"{START}\n{epoch_line(1)}\n{epoch_line(2)}\n")
    mine = made_run(session, tmp_path, "mine", RunState.completed)
    (Path(mine.run_dir) / OUTPUT_FILE).symlink_to(Path(theirs.run_dir) / OUTPUT_FILE)
    cycle_within_bound(engine)
    assert stored(session, mine) == []
    assert len(stored(session, theirs)) == 3
    assert len(refusals(session, mine)) == 1


def test_a_linked_run_directory_is_not_followed(engine, session, tmp_path):
    theirs = made_run(session, tmp_path, "theirs")
    append(theirs, f"{START}\n{epoch_line(1)}\n")
    mine = made_run(session, tmp_path, "mine", RunState.completed)
    Path(mine.run_dir).rmdir()
    Path(mine.run_dir).symlink_to(theirs.run_dir)
    cycle_within_bound(engine)
    assert stored(session, mine) == []
    assert refusals(session, mine) == ["the run's directory is a link, not a directory of its own"]


@contextlib.contextmanager
def counted_commits(engine: Engine) -> Iterator[list[int]]:
    commits = [0]

    def count(_connection: object) -> None:
        commits[0] += 1

    event.listen(engine, "commit", count)
    try:
        yield commits
    finally:
        event.remove(engine, "commit", count)


@pytest.mark.parametrize("state", [RunState.running, RunState.completed])
def test_a_truncated_output_is_refused_once_never_walked_back(engine, session, tmp_path, state):
    """A job that truncates its output below what was read: the offset stays where it was (the records read are
    kept), one event says so, and the following cycles commit nothing for it: on main, a finished run's offset was
    walked back a byte per commit."""
    run = made_run(session, tmp_path, "truncated")
    append(run, START + "\n" + "".join(f"{epoch_line(epoch)}\n" for epoch in range(1, 21)))
    cycle_within_bound(engine)
    session.refresh(run)
    read = run.log_offset
    assert read > 2000
    (Path(run.run_dir) / OUTPUT_FILE).write_text(f"{START}\n")  # truncated, then written again from its start
    run.state = state
    session.add(run)
    session.commit()
    with counted_commits(engine) as commits:
        for _ in range(3):
            cycle_within_bound(engine)
    session.refresh(run)
    assert run.log_offset == read
    assert len(stored(session, run)) == 21
    assert refusals(session, run) == [
        f"{OUTPUT_FILE} of this run was truncated to {len(START) + 1} bytes, below the {read} bytes already read"
    ]
    assert "truncated" in (run.message or "")
    assert commits[0] <= 3, f"{commits[0]} commits for one truncation"


def test_a_replaced_output_is_refused_once(engine, session, tmp_path):
    """Another file in place of the one read (same name, larger): none of its bytes are read at the old offsets."""
    run = made_run(session, tmp_path, "replaced")
    output = Path(run.run_dir) / OUTPUT_FILE
    append(run, f"{START}\n{epoch_line(1)}\n")
    cycle_within_bound(engine)
    session.refresh(run)
    replacement = Path(run.run_dir) / "other.log"
    replacement.write_text(f"{START}\n{epoch_line(1)}\n{epoch_line(2)}\n{epoch_line(3)}\n")
    os.replace(replacement, output)
    for _ in range(3):
        cycle_within_bound(engine)
    session.refresh(run)
    assert [m.epoch for m in stored(session, run) if m.kind == "epoch"] == [1]
    assert len(refusals(session, run)) == 1
    assert "replaced" in (run.message or "")
    run.state = RunState.completed
    session.add(run)
    session.commit()
    cycle_within_bound(engine)
    session.refresh(run)
    assert run.ingest_done and len(refusals(session, run)) == 1
