"""A run's new lines parsed into records: progress lines passed over, broken ones counted, course scripts' legacy
lines read; and the row a record is stored as: the same JSON whichever parser read its line (the worker's lines take
a faster one), and a figure Python cannot write as plain JSON kept as Python writes it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from sqlmodel import col, select

from contract.records import StepRecord, format_record, parse_metric_line
from contract.rundir import OUTPUT_FILE
from server.models import Metric
from server.services.ingestion.parsing import ingest
from tests.server.services.ingestion.output import START, append, cycle, epoch_line, stored


def test_records_and_progress_lines(session, run):
    append(run, f"{START}\nepoch 1/2: some progress\n{epoch_line(1)}\n")
    assert cycle(session, run) == 3
    assert [m.kind for m in stored(session, run)] == ["start", "epoch"]
    assert run.log_offset == (Path(run.run_dir) / OUTPUT_FILE).stat().st_size
    assert run.parse_errors == 0


def test_garbage_is_counted_and_skipped(session, run):
    append(run, "[METRIC] {not json\n\xff\xfe binary\n[METRIC] epoch=x=1 loss\n" + epoch_line(1) + "\n")
    cycle(session, run)
    assert [m.epoch for m in stored(session, run)] == [1]
    assert run.parse_errors == 2


def test_legacy_lines_are_read(session, run):
    append(run, "[METRIC] epoch=1 loss=0.9 val_acc=0.5 time=3.0\n")
    cycle(session, run)
    assert stored(session, run)[0].record["train_loss"] == 0.9


def stored_records(session, run) -> list[dict]:
    return list(session.exec(select(Metric.record).where(Metric.run_id == run.id).order_by(col(Metric.offset))).all())


def test_each_record_is_stored_as_its_fields_that_are_set(session, run):
    """Lines as the worker prints them, one with a field a newer worker adds, and the same records printed with
    spaces and nulls (which the full parser reads): each row holds the record's set fields, nothing else."""
    step = format_record(StepRecord(epoch=1, step=7, train_loss=0.25))
    newer = step[:-1] + ',"grad_norm":1.5}'
    spaced = '[METRIC] {"v": 1, "kind": "step", "epoch": 1, "step": 8, "train_loss": 0.5, "rank": null}'
    lines = [START, epoch_line(1), step, newer, spaced]
    append(run, "\n".join(lines) + "\n")
    ingest(session, run)
    session.commit()
    expected = []
    for line in lines:
        record = parse_metric_line(line)
        assert record is not None
        expected.append(record.model_dump(mode="json", exclude_none=True))
    assert stored_records(session, run) == expected
    assert expected[3]["grad_norm"] == 1.5


def test_a_non_finite_figure_is_stored_as_python_writes_it(session, run, engine):
    """A course script's loss=nan: kept as NaN (not as null, which would no longer be a valid epoch record)."""
    if engine.dialect.name != "sqlite":
        pytest.skip("PostgreSQL's json type refuses NaN, whichever way it is written")
    append(
        run,
        "[METRIC] epoch=1 loss=nan time=2\n" + '[METRIC] {"v":1,"kind":"step","epoch":1,"step":1,"train_loss":NaN}\n',
    )
    ingest(session, run)
    session.commit()
    assert [math.isnan(record["train_loss"]) for record in stored_records(session, run)] == [True, True]
