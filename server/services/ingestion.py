"""Reading a run's new metric lines from its output file, from the byte offset stored last time."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from sqlmodel import Session, col, select

from contract.records import (
    EndRecord,
    EpochRecord,
    InferenceRecord,
    MetricParseError,
    MetricRecord,
    ResumeRecord,
    StartRecord,
    parse_metric_line,
)
from contract.rundir import OUTPUT_FILE
from server.models import Metric, Run, RunSummary

log = logging.getLogger(__name__)

# How much of a file one cycle reads: a run that printed a lot catches up over a few cycles.
CHUNK_BYTES = 4 * 1024 * 1024
# A line longer than this is not a metric record the worker wrote.
MAX_LINE_BYTES = 1024 * 1024


def apply_record(summary: RunSummary, record: MetricRecord) -> None:
    """Fold one record into the run's latest figures."""
    if isinstance(record, StartRecord):
        summary.world_size = record.world_size
        summary.device = record.device
        summary.total_time_s = summary.end_status = None
    elif isinstance(record, EpochRecord):
        summary.epochs_done += 1
        if summary.first_epoch_time_s is None:
            summary.first_epoch_time_s = record.epoch_time_s
        summary.epoch_time_sum_s += record.epoch_time_s
        summary.last_train_loss = record.train_loss
        summary.last_val_loss = record.val_loss
        summary.last_val_accuracy = record.val_accuracy
        summary.last_samples_per_s = record.samples_per_s
        if record.peak_memory_bytes is not None:
            summary.peak_memory_bytes = max(summary.peak_memory_bytes or 0, record.peak_memory_bytes)
    elif isinstance(record, InferenceRecord):
        summary.peak_memory_bytes = record.peak_memory_bytes
    elif isinstance(record, EndRecord):
        summary.total_time_s = record.total_time_s
        summary.end_status = record.status


def _rewind(session: Session, run: Run, summary: RunSummary, epoch: int) -> None:
    """A run resumed from a checkpoint repeats the epochs after it: rebuild the figures from the epochs it kept."""
    kept = session.exec(
        select(Metric)
        .where(Metric.run_id == run.id, Metric.kind == "epoch", col(Metric.epoch) <= epoch)
        .order_by(col(Metric.offset))
    ).all()
    latest = {metric.epoch: metric for metric in kept}  # a later record of an epoch supersedes an earlier one
    for name in ("first_epoch_time_s", "last_train_loss", "last_val_loss", "last_val_accuracy"):
        setattr(summary, name, None)
    summary.last_samples_per_s = summary.peak_memory_bytes = None
    summary.epochs_done, summary.epoch_time_sum_s = 0, 0.0
    for _, metric in sorted(latest.items()):
        apply_record(summary, EpochRecord.model_validate(metric.record))


def record_provenance(run: Run, record: StartRecord) -> None:
    """The run's latest start tells what it runs in: a requeued job may have started on a newer image."""
    run.image = record.image
    run.image_digest = record.image_digest
    run.worker_version = record.worker_version
    run.torch_version = record.torch_version
    run.source_revision = record.source_revision


def store_record(session: Session, run: Run, summary: RunSummary, offset: int, record: MetricRecord) -> None:
    """Stage one record of the line at `offset` in the run's history and fold it into its summary."""
    session.add(
        Metric(
            run_id=run.id,
            offset=offset,
            kind=record.kind,
            epoch=getattr(record, "epoch", None),
            record=record.model_dump(mode="json", exclude_none=True),
        )
    )
    # Each start of the worker (a resubmission or a requeue) begins from no epochs, and a resume record that
    # follows brings back those its checkpoint kept.
    if isinstance(record, StartRecord):
        _rewind(session, run, summary, 0)
        record_provenance(run, record)
    if isinstance(record, ResumeRecord):
        _rewind(session, run, summary, record.epoch)
    apply_record(summary, record)
    if isinstance(record, EndRecord) and record.error:
        run.message = f"the worker reported: {record.error}"


def _parsed(run: Run, raw: bytes, offset: int, problem: str) -> MetricRecord | None:
    """The line's record, or None for a line that is not one; a broken or overlong line counts as a parse error."""
    if len(raw) > MAX_LINE_BYTES:
        run.parse_errors += 1
        return None
    try:
        return parse_metric_line(raw.decode("utf-8", errors="replace"))
    except MetricParseError as exc:
        run.parse_errors += 1
        log.warning("run %s: %s at byte %d: %s", run.id, problem, offset, exc)
        return None


def ingest_tail(session: Session, run: Run) -> None:
    """A finished run's last line without its newline (the job was killed while printing it): stage its record, or
    count it as a parse error if it was cut inside one; either way the file is read to its end."""
    path = Path(run.run_dir) / OUTPUT_FILE
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size <= run.log_offset:
                return
            handle.seek(run.log_offset)
            tail = handle.read(MAX_LINE_BYTES + 1)
    except FileNotFoundError:
        return
    offset, run.log_offset = run.log_offset, size
    session.add(run)
    record = _parsed(run, tail, offset, "its last line was cut short")
    if record is not None:
        summary = session.get(RunSummary, run.id) or RunSummary(run_id=run.id)
        store_record(session, run, summary, offset, record)
        session.add(summary)


def ingest(session: Session, run: Run) -> int:
    """Stage the run's new complete records and its new offset in the session; the caller commits both at once.

    Returns how many complete lines were read (0: nothing new).
    """
    path = Path(run.run_dir) / OUTPUT_FILE
    # Read one byte before the offset too: it tells whether the offset starts a line or sits inside one
    # that an earlier cycle skipped for being too long.
    start = max(run.log_offset - 1, 0)
    try:
        with path.open("rb") as handle:
            handle.seek(start)
            chunk = handle.read(CHUNK_BYTES + run.log_offset - start)
    except FileNotFoundError:
        return 0
    inside_skipped_line = run.log_offset > 0 and chunk[:1] != b"\n"
    # Indexes into the chunk rather than slices of it: a copy of a chunk of one overlong line would double the
    # memory that line takes.
    begin = run.log_offset - start
    new_bytes = len(chunk) - begin
    if inside_skipped_line:
        rest = chunk.find(b"\n", begin)
        skipped = new_bytes if rest < 0 else rest + 1 - begin
        run.log_offset += skipped
        session.add(run)
        return 1 if skipped else 0
    end = chunk.rfind(b"\n", begin)
    if end < 0:
        if new_bytes == CHUNK_BYTES:
            # One line longer than a whole chunk: not a metric line; skip it, counted once.
            run.parse_errors += 1
            run.log_offset += new_bytes
            session.add(run)
            return 1
        return 0  # a partial last line: wait for the rest of it
    summary = session.get(RunSummary, run.id) or RunSummary(run_id=run.id)
    offset = run.log_offset
    lines = chunk[begin : end + 1].splitlines(keepends=True)
    for raw in lines:
        line_offset, offset = offset, offset + len(raw)
        record = _parsed(run, raw, line_offset, "unreadable metric line")
        if record is not None:
            store_record(session, run, summary, line_offset, record)
    run.log_offset = offset
    session.add(summary)
    session.add(run)
    return len(lines)
