"""Reading a run's new metric lines from its output file, from the byte offset stored last time.

Ingestion also owns the rule "which records count after a start or a resume of the worker" (`Standing`): it keeps
each record's verdict in `Metric.counts` and the run's summary folded from the records that count, so that the
comparison, the pages and the API read the verdict instead of working it out again.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import Float, bindparam
from sqlmodel import Session, col, or_, select

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

# The kinds whose records are figures of one place of the run (an epoch, a rank's memory or timings in an epoch, the
# inference figures): a later print of the same place replaces a record, and a new start of the worker drops it.
PLACED_KINDS = ("epoch", "memory", "timing", "inference")
# Kinds printed once per rank: the rank is part of their place.
PER_RANK_KINDS = frozenset({"memory", "timing"})
# The kinds the rule reads: the placed ones and those that change what counts.
RULE_KINDS = frozenset({"start", "resume", *PLACED_KINDS})


class Place(NamedTuple):
    """A record's kind, epoch and rank; for a placed kind, the figure it gives (epoch None: the inference figures,
    which no checkpoint holds)."""

    kind: str
    epoch: int | None
    rank: int | None


def place_of(kind: str, epoch: int | None, record: Mapping[str, Any]) -> Place:
    """The place of a stored record: a per-rank record's rank is in its JSON alone."""
    return Place(kind, epoch, record.get("rank") if kind in PER_RANK_KINDS else None)


class Change(NamedTuple):
    """The offsets of the records that one record made stop counting, and of those it made count again."""

    dropped: list[int]
    restored: list[int]


# Every placed record printed so far whose epoch is at most the given one, in output order, as (place, offset).
Printed = Callable[[int], Iterable[tuple[Place, int]]]


class Standing:
    """Which of one run's records count now, one per place, named by offset: the rule, written here only.

    Records in output order: a `start` (a new attempt of the worker) drops everything placed so far; a `resume` of
    epoch e brings back, for each place of an epoch at most e, the latest record of it printed so far, and drops the
    rest; any other placed record replaces the one of its place. What was printed before is asked of `printed` only
    at a resume, so that ingestion reads it from the database then and not on every record.
    """

    def __init__(self, counting: Mapping[Place, int], printed: Printed) -> None:
        self.counting = dict(counting)
        self._printed = printed

    def apply(self, offset: int, place: Place) -> Change:
        """Take the record at `offset` into account."""
        if place.kind == "start":
            dropped, self.counting = list(self.counting.values()), {}
            return Change(dropped, [])
        if place.kind == "resume" and place.epoch is not None:
            last = place.epoch
            kept = {other: at for other, at in self._printed(last) if other.epoch is not None and other.epoch <= last}
            dropped = [at for other, at in self.counting.items() if kept.get(other) != at]
            restored = [at for other, at in kept.items() if self.counting.get(other) != at]
            self.counting = kept
            return Change(dropped, restored)
        if place.kind in PLACED_KINDS:
            replaced = self.counting.get(place)
            self.counting[place] = offset
            return Change([] if replaced is None else [replaced], [])
        return Change([], [])


def counting(history: Iterable[tuple[int, Place]]) -> set[int]:
    """The offsets of the records that count, of a run's whole history given as (offset, place) in output order:
    the rule replayed from the first record, for a database filled before the verdicts were kept."""
    printed: list[tuple[Place, int]] = []
    standing = Standing({}, lambda _epoch: printed)
    for offset, place in history:
        standing.apply(offset, place)
        if place.kind in PLACED_KINDS:
            printed.append((place, offset))
    return set(standing.counting.values())


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
            summary.peak_memory_kind = record.memory_kind
        if record.peak_rss_bytes is not None:
            summary.peak_rss_bytes = max(summary.peak_rss_bytes or 0, record.peak_rss_bytes)
    elif isinstance(record, InferenceRecord):
        summary.peak_memory_bytes = record.peak_memory_bytes
        summary.peak_memory_kind = record.memory_kind
        summary.peak_rss_bytes = record.peak_rss_bytes
    elif isinstance(record, EndRecord):
        summary.total_time_s = record.total_time_s
        summary.end_status = record.status


def _refold(summary: RunSummary, epochs: Iterable[EpochRecord]) -> None:
    """Rebuild the summary's epoch figures from the epochs that count, in epoch order."""
    for name in ("first_epoch_time_s", "last_train_loss", "last_val_loss", "last_val_accuracy"):
        setattr(summary, name, None)
    summary.last_samples_per_s = summary.peak_memory_bytes = summary.peak_memory_kind = summary.peak_rss_bytes = None
    summary.epochs_done, summary.epoch_time_sum_s = 0, 0.0
    for record in sorted(epochs, key=lambda epoch: epoch.epoch):
        apply_record(summary, record)


def record_provenance(run: Run, record: StartRecord) -> None:
    """The run's latest start tells what it runs in: a requeued job may have started on a newer image."""
    run.image = record.image
    run.image_digest = record.image_digest
    run.worker_version = record.worker_version
    run.torch_version = record.torch_version
    run.source_revision = record.source_revision


# The offsets of a run's counting records with no epoch or one from :epoch on (-inf: all of them; inf: none with one).
_COUNTING_FROM = select(Metric.offset).where(
    Metric.run_id == bindparam("run_id"),
    col(Metric.counts),
    col(Metric.kind).in_(PLACED_KINDS),
    # A float, not the column's integer: PostgreSQL refuses an infinite integer, and -inf/inf mean all/none.
    or_(col(Metric.epoch).is_(None), col(Metric.epoch) >= bindparam("epoch", type_=Float)),
)


class Tally:
    """One run's records staged in one transaction: their history rows, their verdicts and the run's summary.

    The verdicts change on the records' objects in the session, so that they are written together with the records
    and the new offset, or not at all. What counts already is read from the database only as far back as the rule
    needs: a record of epoch k can only replace a record of epoch k, and only an epoch after k changes how it is
    folded into the summary, so a live run's cycle reads none of its past; a start or a resume reads it all.
    """

    def __init__(self, session: Session, run: Run, summary: RunSummary) -> None:
        self.session, self.run, self.summary = session, run, summary
        self._standing = Standing({}, self._printed)
        # The standing holds every counting record with no epoch or an epoch from this one on (None: none yet).
        self._known_from: float | None = None
        self._metrics: dict[int, Metric] = {}  # the records the rule has read here, by offset

    def store(self, offset: int, record: MetricRecord) -> None:
        """Stage one record of the line at `offset` in the run's history and fold it into its summary."""
        epoch = getattr(record, "epoch", None)
        if record.kind in RULE_KINDS:
            # Before the record is staged: it must not be read back as one that counted already.
            self._need(-math.inf if record.kind in ("start", "resume") else math.inf if epoch is None else epoch)
        metric = Metric(
            run_id=self.run.id,
            offset=offset,
            kind=record.kind,
            epoch=epoch,
            record=record.model_dump(mode="json", exclude_none=True),
        )
        self.session.add(metric)
        refolded = False
        if record.kind in RULE_KINDS and self._judge(metric, record):
            self._need(-math.inf)
            _refold(self.summary, self._counting_epochs())
            refolded = True
        if isinstance(record, StartRecord):
            record_provenance(self.run, record)
        if not (refolded and isinstance(record, EpochRecord)):  # the refold has folded it in already
            apply_record(self.summary, record)
        if isinstance(record, EndRecord) and record.error:
            self.run.message = f"the worker reported: {record.error}"

    def _judge(self, metric: Metric, record: MetricRecord) -> bool:
        """Apply the rule to the record; whether the summary's epoch figures must be folded again."""
        change = self._standing.apply(metric.offset, self._know(metric))
        for offset in change.dropped:
            self._metrics[offset].counts = False
        for offset in change.restored:
            self._metrics[offset].counts = True
        if isinstance(record, StartRecord | ResumeRecord):
            return True
        if any(self._metrics[offset].kind == "epoch" for offset in (*change.dropped, *change.restored)):
            return True
        # An epoch before one that counts is folded in its place among them, not as the latest.
        return isinstance(record, EpochRecord) and any(
            other.kind == "epoch" and other.epoch is not None and other.epoch > record.epoch
            for other in self._standing.counting
        )

    def _counting_epochs(self) -> list[EpochRecord]:
        return [
            EpochRecord.model_validate(self._metrics[offset].record)
            for place, offset in self._standing.counting.items()
            if place.kind == "epoch"
        ]

    def _need(self, epoch: float) -> None:
        """Read into the standing the counting records with no epoch or one from `epoch` on that it lacks."""
        if self._known_from is not None and epoch >= self._known_from:
            return
        # On the connection, not through the session: no flush of what this tally staged (it knows those records,
        # and one flush at the commit writes a cycle's records in one batch), and none of the ORM's cost per query,
        # which a live run's cycle pays for an answer that is almost always empty.
        found = self.session.connection().execute(_COUNTING_FROM, {"run_id": self.run.id, "epoch": epoch})
        lacking = [offset for (offset,) in found if offset not in self._metrics]  # those known are in the standing
        if lacking:
            query = select(Metric).where(Metric.run_id == self.run.id, col(Metric.offset).in_(lacking))
            for metric in self.session.exec(query.order_by(col(Metric.offset))):
                self._standing.counting[self._know(metric)] = metric.offset
        self._known_from = epoch

    def _printed(self, epoch: int) -> list[tuple[Place, int]]:
        metrics = self.session.exec(
            select(Metric)
            .where(Metric.run_id == self.run.id, col(Metric.kind).in_(PLACED_KINDS), col(Metric.epoch) <= epoch)
            .order_by(col(Metric.offset))
        ).all()
        return [(self._know(metric), metric.offset) for metric in metrics]

    def _know(self, metric: Metric) -> Place:
        self._metrics[metric.offset] = metric
        return place_of(metric.kind, metric.epoch, metric.record)


def store_record(session: Session, run: Run, summary: RunSummary, offset: int, record: MetricRecord) -> None:
    """Stage one record, for a caller storing a few: a tally of its own reads what counts from the database."""
    if record.kind in RULE_KINDS:
        session.flush()  # the records staged by earlier calls, which this tally does not know, are read back
    Tally(session, run, summary).store(offset, record)


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
    tally = Tally(session, run, summary)
    offset = run.log_offset
    lines = chunk[begin : end + 1].splitlines(keepends=True)
    for raw in lines:
        line_offset, offset = offset, offset + len(raw)
        record = _parsed(run, raw, line_offset, "unreadable metric line")
        if record is not None:
            tally.store(line_offset, record)
    run.log_offset = offset
    session.add(summary)
    session.add(run)
    return len(lines)
