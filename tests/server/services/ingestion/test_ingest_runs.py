"""The monitor's entry point: which runs are read and how, a finished run's cut last line, its reading done, and
the runs that reached the end of their output told as they do."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from contract.rundir import OUTPUT_FILE
from contract.states import RunState
from server.models import Run, utcnow
from server.monitor import Monitor
from server.services.ingestion import ingest_runs
from tests.factories import experiment_row, run_row
from tests.server.services.ingestion.output import START, append, epoch_line, stored


def test_broken_huge_and_cut_lines_through_the_monitor_with_bounded_memory(engine, session, tmp_path, local_scheduler):
    """With the real limits: 10 MB lines (a metric line and plain output), garbled and truncated records, and a
    last line the job never finished. Each broken line is one parse error; the good records around them are all
    stored; no read holds a 10 MB line whole."""
    run = run_row(session, experiment_row(session), tmp_path, state=RunState.running, scheduler="local")
    huge = 10 * 1024 * 1024
    cut_record = epoch_line(9)[:40]  # a record cut inside its JSON, then the next line began
    append(run, f"{START}\n[METRIC] {{not json\n\xff\xfe binary\n{cut_record}\n")
    append(run, b"[METRIC] {" + b"7" * huge + b"\n")
    append(run, epoch_line(1) + "\n")
    append(run, b"no newline for a long while " + b"z" * huge + b"\n")
    append(run, epoch_line(2) + "\n" + cut_record)  # the job was killed while printing its last line
    monitor = Monitor(engine, local_scheduler, 0.1)

    tracemalloc.start()
    try:
        monitor.ingest_metrics()  # running: reads on while the last line may still be completed
        session.refresh(run)
        assert [m.kind for m in stored(session, run)] == ["start", "epoch", "epoch"]
        assert (run.parse_errors, run.ingest_done) == (4, False)
        run.state = RunState.failed
        session.add(run)
        session.commit()
        monitor.ingest_metrics()  # ended: its unfinished last line is a parse error too, and reading is over
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    session.refresh(run)
    assert (run.parse_errors, run.ingest_done) == (5, True)
    assert run.log_offset == (tmp_path / OUTPUT_FILE).stat().st_size
    assert [m.epoch for m in stored(session, run) if m.kind == "epoch"] == [1, 2]
    assert peak < huge, f"{peak / 2**20:.1f} MiB held at once"


def test_the_runs_read_and_those_told_caught_up(engine, session, tmp_path):
    """A live run with new lines and one with none, a run that ended, and runs with nothing to read (never started,
    created, reading done): the followed ones are returned, each told caught up as its records reach its file's end,
    and the ended one's reading is done, so that the next call follows it no more."""
    experiment = experiment_row(session)

    def made(name: str, state: RunState, text: str | None, **overrides) -> Run:
        (tmp_path / name).mkdir()
        run = run_row(session, experiment, tmp_path / name, state=state, position=len(made_runs), **overrides)
        if text is not None:
            append(run, text)
        made_runs[name] = run
        return run

    made_runs: dict[str, Run] = {}
    started = utcnow()
    made("live", RunState.running, f"{START}\n{epoch_line(1)}\n", started_at=started)
    made("quiet", RunState.running, None, started_at=started)
    made("ended", RunState.completed, f"{START}\n{epoch_line(1)}\n{epoch_line(2)[:30]}", started_at=started)
    made("queued", RunState.pending, f"{START}\n")  # never started: not even looked at
    made("created", RunState.created, f"{START}\n")
    made("done", RunState.completed, f"{START}\n", ingest_done=True)
    told: list[str] = []

    followed = ingest_runs(engine, told.append)

    ids = {name: run.id for name, run in made_runs.items()}
    assert followed == {ids["live"], ids["quiet"], ids["ended"]}
    assert sorted(told) == sorted(followed)
    for name in ("live", "ended", "queued"):
        session.refresh(made_runs[name])
    assert [m.kind for m in stored(session, made_runs["live"])] == ["start", "epoch"]
    ended = made_runs["ended"]
    assert (ended.ingest_done, ended.parse_errors) == (True, 1)  # its cut last line read, a parse error
    assert ended.log_offset == (Path(ended.run_dir) / OUTPUT_FILE).stat().st_size
    assert made_runs["queued"].log_offset == 0
    assert ingest_runs(engine, told.append) == {ids["live"], ids["quiet"]}
