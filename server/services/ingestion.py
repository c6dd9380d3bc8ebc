"""Reading a run's new metric lines from its output file, from the byte offset stored last time.

Ingestion also owns the rule "which records count after a start or a resume of the worker" (`Standing`): it keeps
each record's verdict in `Metric.counts` and the run's summary folded from the records that count, so that the
comparison, the pages and the API read the verdict instead of working it out again.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import JSON, Float, String, Table, bindparam, insert, update
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlmodel import Session, col, or_, select

from contract.records import (
    METRIC_PREFIX,
    EndRecord,
    EpochRecord,
    InferenceRecord,
    MetricParseError,
    MetricRecord,
    ResumeRecord,
    StartRecord,
    parse_metric_line,
    parse_record_json,
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


# The kinds apply_record folds into the summary; the others (steps, most of a history) leave it as it is.
FOLDED_KINDS = frozenset({"start", "epoch", "inference", "end"})


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


# ---- the rows: one statement per batch, no ORM object per record -----------------------------------------------


class _StoredJSON(FunctionElement[Any]):
    """A record's JSON text, written as it is: the record column's own type would serialise the text again."""

    type = JSON()
    inherit_cache = True


@compiles(_StoredJSON)
def _stored_json(element: _StoredJSON, compiler: SQLCompiler, **kw: Any) -> str:
    (text,) = element.clauses
    # SQLite keeps JSON as text. (PostgreSQL takes the records by COPY, which never compiles this statement.)
    return compiler.process(text, **kw)


class _Rows:
    """Many rows of one table, each a plain tuple in the order of `columns`, written in one go: PostgreSQL's COPY;
    elsewhere one INSERT made by the query builder, compiled once per dialect, given to the driver's executemany.
    SQLAlchemy's own executemany, and psycopg's, cost more per row than reading the line did. Either way a row that
    breaks a constraint (a line stored twice) fails them all, and with them the transaction."""

    def __init__(self, table: Table, columns: tuple[str, ...], json_columns: frozenset[str] = frozenset()) -> None:
        self.table, self.columns = table, columns
        # Binds named apart from their columns: the query builder keeps the columns' own names for itself.
        self.names = tuple(f"new_{column}" for column in columns)
        values: dict[str, Any] = {
            column: _StoredJSON(bindparam(name, type_=String)) if column in json_columns else bindparam(name)
            for column, name in zip(columns, self.names, strict=True)
        }
        # inline: no primary key fetched back, which would cost PostgreSQL a RETURNING per row.
        self.statement = insert(table).inline().values(values)
        self._compiled: dict[str, tuple[str, list[int] | None]] = {}

    def insert(self, connection: Connection, rows: list[tuple[Any, ...]]) -> None:
        if connection.dialect.name == "postgresql":
            self._copy(connection, rows)
            return
        sql, order = self._compiled.get(connection.dialect.name) or self._compile(connection.dialect)
        if order is None:  # the driver takes named parameters
            connection.exec_driver_sql(sql, [dict(zip(self.names, row, strict=True)) for row in rows])
        elif order == list(range(len(self.names))):
            connection.exec_driver_sql(sql, rows)
        else:
            connection.exec_driver_sql(sql, [tuple(row[i] for i in order) for row in rows])

    def _copy(self, connection: Connection, rows: list[tuple[Any, ...]]) -> None:
        # The query builder has no COPY: the statement names only the table and columns, quoted by the dialect.
        quote = connection.dialect.identifier_preparer
        into = f"{quote.format_table(self.table)} ({', '.join(quote.quote(column) for column in self.columns)})"
        statement = f"COPY {into} FROM STDIN"
        driver = connection.connection.driver_connection
        dialect = connection.dialect
        try:
            with driver.cursor() as cursor, cursor.copy(statement) as copy:  # type: ignore[union-attr]
                for row in rows:
                    copy.write_row(row)
        except dialect.loaded_dbapi.Error as exc:
            # Reported as SQLAlchemy reports the statements it runs (IntegrityError for a line stored twice), and a
            # connection lost on the way is not given back to the pool.
            lost = dialect.is_disconnect(exc, driver, None)
            if lost:
                connection.invalidate(exc)
            raise DBAPIError.instance(
                statement, None, exc, dialect.loaded_dbapi.Error, connection_invalidated=lost, dialect=dialect
            ) from exc

    def _compile(self, dialect: Dialect) -> tuple[str, list[int] | None]:
        compiled = self.statement.compile(dialect=dialect)
        positions = compiled.positiontup
        order = [self.names.index(name) for name in positions] if compiled.positional and positions else None
        self._compiled[dialect.name] = (str(compiled), order)
        return str(compiled), order


# A batch's records in one statement; a line stored twice is refused by the unique (run_id, offset) key, which
# fails the whole transaction, its records and its offset together, so nothing is ever counted twice.
_RECORDS = _Rows(
    Metric.__table__,  # type: ignore[attr-defined]
    ("run_id", "offset", "kind", "epoch", "record", "counts"),
    json_columns=frozenset({"record"}),
)
_SET_VERDICTS = (
    update(Metric)
    .where(col(Metric.run_id) == bindparam("run"), col(Metric.offset) == bindparam("at"))
    .values(counts=bindparam("verdict"))
)
_ROW_COLUMNS = (col(Metric.offset), col(Metric.kind), col(Metric.epoch), col(Metric.record), col(Metric.counts))
# The offsets of a run's counting records with no epoch or one from :epoch on (-inf: all of them; inf: none with one).
_COUNTING_FROM = select(Metric.offset).where(
    Metric.run_id == bindparam("run"),
    col(Metric.counts),
    col(Metric.kind).in_(PLACED_KINDS),
    # A float, not the column's integer: PostgreSQL refuses an infinite integer, and -inf/inf mean all/none.
    or_(col(Metric.epoch).is_(None), col(Metric.epoch) >= bindparam("epoch", type_=Float)),
)
_RECORDS_AT = sa_select(*_ROW_COLUMNS).where(
    col(Metric.run_id) == bindparam("run"), col(Metric.offset).in_(bindparam("offsets", expanding=True))
)
_PRINTED_UP_TO = (
    sa_select(*_ROW_COLUMNS)
    .where(
        col(Metric.run_id) == bindparam("run"),
        col(Metric.kind).in_(PLACED_KINDS),
        col(Metric.epoch) <= bindparam("epoch"),
    )
    .order_by(col(Metric.offset))
)


def stored_json(record: MetricRecord) -> str:
    """A record as its row holds it: the JSON of its fields that are set (non-finite floats as Python writes them)."""
    return json.dumps(record.model_dump(mode="json", exclude_none=True))


class _Row:
    """One record as the rule sees it: staged by this tally (`record` parsed, `text` its JSON) or read back from the
    database (`record` its stored JSON), and whether it counts now and in the database."""

    __slots__ = ("counted", "counts", "epoch", "kind", "offset", "record", "stored", "text")

    def __init__(self, offset: int, kind: str, epoch: int | None, record: Any, text: str | None, counts: bool) -> None:
        self.offset, self.kind, self.epoch, self.record, self.text = offset, kind, epoch, record, text
        self.counts = self.counted = counts
        self.stored = text is None

    @property
    def place(self) -> Place:
        if self.kind not in PER_RANK_KINDS:
            return Place(self.kind, self.epoch, None)
        rank = self.record.get("rank") if isinstance(self.record, dict) else getattr(self.record, "rank", None)
        return Place(self.kind, self.epoch, rank)

    def epoch_record(self) -> EpochRecord:
        return self.record if isinstance(self.record, EpochRecord) else EpochRecord.model_validate(self.record)


class Tally:
    """One run's records staged in one transaction: their history rows, their verdicts and the run's summary.

    The records are kept as plain rows and written by `write`, in one statement, with their verdicts as they stand
    then; verdicts that changed on records stored earlier are written beside them, so that everything goes with the
    new offset, or nothing does. What counts already is read from the database only as far back as the rule needs:
    a record of epoch k can only replace a record of epoch k, and only an epoch after k changes how it is folded into
    the summary, so a live run's cycle reads none of its past; a start or a resume reads it all.
    """

    def __init__(self, session: Session, run: Run, summary: RunSummary | None = None) -> None:
        self.session, self.run = session, run
        self._summary = summary
        self._standing = Standing({}, self._printed)
        # The standing holds every counting record with no epoch or an epoch from this one on (None: none yet).
        self._known_from: float | None = None
        self._rows: dict[int, _Row] = {}  # the records the rule has read, staged or stored, by offset
        self._last_epoch: float | None = None  # the latest epoch counting, when known
        # In output order: the records the rule reads as rows, the others as (offset, kind, epoch, JSON).
        self._staged: list[_Row | tuple[int, str, int | None, str]] = []

    @property
    def summary(self) -> RunSummary:
        """The run's summary, read when a record first changes it: a cycle of step records never reads it."""
        if self._summary is None:
            self._summary = self.session.get(RunSummary, self.run.id) or RunSummary(run_id=self.run.id)
            self.session.add(self._summary)
        return self._summary

    def store(self, offset: int, record: MetricRecord, text: str | None = None) -> None:
        """Stage one record of the line at `offset` (`text`: its JSON, if made already) in the run's history and
        fold it into its summary."""
        kind = record.kind
        epoch = getattr(record, "epoch", None)
        if text is None:
            text = stored_json(record)
        refolded = False
        if kind in RULE_KINDS:
            # Before the record is known here: it must not be taken for one that counted already.
            self._need(-math.inf if kind in ("start", "resume") else math.inf if epoch is None else epoch)
            row = self._rows[offset] = _Row(offset, kind, epoch, record, text, True)
            self._staged.append(row)
            if self._judge(row, record):
                self._need(-math.inf)
                _refold(self.summary, self._counting_epochs())
                refolded = True
        else:
            # Most of a history (steps): no verdict but "counts", and nothing the rule reads again.
            self._staged.append((offset, kind, epoch, text))
        if kind in FOLDED_KINDS and not (refolded and kind == "epoch"):  # the refold has folded the epoch in already
            apply_record(self.summary, record)
        if isinstance(record, StartRecord):
            record_provenance(self.run, record)
        if isinstance(record, EndRecord) and record.error:
            self.run.message = f"the worker reported: {record.error}"

    def write(self) -> None:
        """Write the staged records, and the verdicts that changed on records stored before: a statement each."""
        connection = self.session.connection()
        run_id = self.run.id
        if self._staged:
            _RECORDS.insert(
                connection,
                [
                    (run_id, *staged, True)
                    if isinstance(staged, tuple)
                    else (run_id, staged.offset, staged.kind, staged.epoch, staged.text, staged.counts)
                    for staged in self._staged
                ],
            )
            for staged in self._staged:
                if isinstance(staged, _Row):
                    staged.stored, staged.counted = True, staged.counts
            self._staged = []
        changed = [row for row in self._rows.values() if row.stored and row.counts != row.counted]
        if changed:
            connection.execute(
                _SET_VERDICTS, [{"run": run_id, "at": row.offset, "verdict": row.counts} for row in changed]
            )
            for row in changed:
                row.counted = row.counts

    def _judge(self, row: _Row, record: MetricRecord) -> bool:
        """Apply the rule to the record; whether the summary's epoch figures must be folded again."""
        change = self._standing.apply(row.offset, row.place)
        for offset in change.dropped:
            self._rows[offset].counts = False
        for offset in change.restored:
            self._rows[offset].counts = True
        if isinstance(record, StartRecord | ResumeRecord) or any(
            self._rows[offset].kind == "epoch" for offset in (*change.dropped, *change.restored)
        ):
            self._last_epoch = None
            return True
        if not isinstance(record, EpochRecord):
            return False
        # An epoch before one that counts is folded in its place among them, not as the latest.
        last = self._last_counting_epoch()
        self._last_epoch = max(last, record.epoch)
        return last > record.epoch

    def _last_counting_epoch(self) -> float:
        """The latest epoch that counts: worked out again only when the epochs that count changed otherwise than by
        one more, so that a backlog of thousands of epochs costs no pass over them all per epoch."""
        if self._last_epoch is None:
            epochs = (place.epoch for place in self._standing.counting if place.kind == "epoch")
            self._last_epoch = max((epoch for epoch in epochs if epoch is not None), default=-math.inf)
        return self._last_epoch

    def _counting_epochs(self) -> list[EpochRecord]:
        return [
            self._rows[offset].epoch_record()
            for place, offset in self._standing.counting.items()
            if place.kind == "epoch"
        ]

    def _need(self, epoch: float) -> None:
        """Read into the standing the counting records with no epoch or one from `epoch` on that it lacks."""
        if self._known_from is not None and epoch >= self._known_from:
            return
        # On the connection, not through the session: none of the ORM's cost per query, which a live run's cycle
        # pays for an answer that is almost always empty.
        connection = self.session.connection()
        found = connection.execute(_COUNTING_FROM, {"run": self.run.id, "epoch": epoch})
        lacking = sorted(offset for (offset,) in found if offset not in self._rows)  # those known are in the standing
        if lacking:
            for row in connection.execute(_RECORDS_AT, {"run": self.run.id, "offsets": lacking}).all():
                known = self._know(*row)
                self._standing.counting[known.place] = known.offset
            self._last_epoch = None
        self._known_from = epoch

    def _printed(self, epoch: int) -> list[tuple[Place, int]]:
        stored = self.session.connection().execute(_PRINTED_UP_TO, {"run": self.run.id, "epoch": epoch}).all()
        rows = {known.offset: known for known in (self._know(*row) for row in stored)}
        # Records staged by this tally are not in the database yet, but were printed all the same.
        rows.update(
            (offset, row)
            for offset, row in self._rows.items()
            if row.kind in PLACED_KINDS and row.epoch is not None and row.epoch <= epoch
        )
        return [(rows[offset].place, offset) for offset in sorted(rows)]

    def _know(self, offset: int, kind: str, epoch: int | None, record: dict[str, Any], counts: bool) -> _Row:
        known = self._rows.get(offset)
        if known is None:
            known = self._rows[offset] = _Row(offset, kind, epoch, record, None, counts)
        return known


def store_records(
    session: Session, run: Run, summary: RunSummary | None, records: Iterable[tuple[int, MetricRecord]]
) -> None:
    """Store a run's records given as (offset, record) in output order, for a caller that parsed them itself (its
    summary: the one it holds, or None to read it)."""
    session.flush()  # the run's row must be in the database before the records that point at it
    tally = Tally(session, run, summary)
    for offset, record in records:
        tally.store(offset, record)
    tally.write()


def store_record(session: Session, run: Run, summary: RunSummary, offset: int, record: MetricRecord) -> None:
    """Store one record, for a caller storing a few (store_records for many)."""
    store_records(session, run, summary, [(offset, record)])


# ---- reading the output ---------------------------------------------------------------------------------------------

_PREFIX = METRIC_PREFIX.encode()
# A line as the worker prints it: the prefix, one space and a JSON object.
_WORKER_LINE = _PREFIX + b" {"
_BODY_AT = len(_PREFIX) + 1


def _fast_parsed(raw: bytes) -> tuple[MetricRecord, str] | None:
    """The record of a line as the worker prints it and the JSON its row holds, without a detour through Python
    objects; None for any other line, which the full parser reads (and says what is wrong with)."""
    if not raw.startswith(_WORKER_LINE) or len(raw) > MAX_LINE_BYTES:
        return None
    body = raw[_BODY_AT:]
    record = parse_record_json(body)
    if record is None:
        return None
    lowered = body.lower()
    if b"nan" in lowered or b"inf" in lowered:
        # Non-finite figures (and words that merely contain these letters) keep the full serialiser, which writes
        # NaN and Infinity as Python does, where pydantic's would write null.
        return record, stored_json(record)
    return record, record.__pydantic_serializer__.to_json(record, exclude_none=True).decode()


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
        store_records(session, run, None, [(offset, record)])


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
    tally = Tally(session, run)
    offset = run.log_offset
    lines = chunk[begin : end + 1].splitlines(keepends=True)
    for raw in lines:
        line_offset, offset = offset, offset + len(raw)
        if _PREFIX not in raw:
            continue  # a progress line: no metric record can be on it
        fast = _fast_parsed(raw)
        if fast is not None:
            tally.store(line_offset, *fast)
            continue
        record = _parsed(run, raw, line_offset, "unreadable metric line")
        if record is not None:
            tally.store(line_offset, record)
    tally.write()
    run.log_offset = offset
    session.add(run)
    return len(lines)


# A transaction of live runs reads at most about this much (their new bytes together) and this many runs: SQLite
# holds its one writer's lock until the commit, and other writers wait that long.
BATCH_BYTES = 1024 * 1024
BATCH_RUNS = 256
# Batches stored at once where the database is a server of its own: while it takes one batch's rows (COPY, its
# indexes, the commit) this process reads and parses the next, instead of waiting for it; on a login node of 2
# cores this took a backlog on PostgreSQL from 80-89,000 to 134-146,000 records/s (benches.ingest). SQLite has one
# writer: its batches go one by one.
CONCURRENT_BATCHES = 2


def ingest_live(engine: Engine, runs: Mapping[str, tuple[int, int]]) -> list[str]:
    """Read the new complete lines of runs still under way, each given as (offset, size) with fewer new bytes than
    a chunk, many runs per transaction; the runs read as far as their size, whose records are now all stored.

    Each run's records and offset are still committed together, or not at all; but a cycle of hundreds of live runs
    pays one query for their rows, one flush and one commit per batch instead of per run. A batch that fails is read
    again one run per transaction, so that a run that cannot be stored holds back no other. A run is in one batch
    only, so batches stored at once never store a run's records twice.
    """
    batches = list(_batches(runs))
    if engine.dialect.name == "sqlite" or len(batches) < 2:
        stored = [_ingest_batch_or_each(engine, batch, runs) for batch in batches]
    else:
        with ThreadPoolExecutor(CONCURRENT_BATCHES, thread_name_prefix="ingest") as pool:
            stored = list(pool.map(lambda batch: _ingest_batch_or_each(engine, batch, runs), batches))
    return [run_id for done in stored for run_id in done]


def _ingest_batch_or_each(engine: Engine, batch: list[str], runs: Mapping[str, tuple[int, int]]) -> list[str]:
    try:
        return _ingest_batch(engine, batch, runs)
    except SQLAlchemyError as exc:
        log.warning("storing %d runs' records at once failed, storing them one run at a time: %s", len(batch), exc)
    done: list[str] = []
    for run_id in batch:
        try:
            done += _ingest_batch(engine, [run_id], runs)
        except SQLAlchemyError:
            # Nothing of it was stored, its offset included: the next cycle tries it again.
            log.exception("run %s: its new records could not be stored", run_id)
    return done


def _batches(runs: Mapping[str, tuple[int, int]]) -> Iterator[list[str]]:
    batch: list[str] = []
    new_bytes = 0
    for run_id, (offset, size) in runs.items():
        if batch and (new_bytes + size - offset > BATCH_BYTES or len(batch) == BATCH_RUNS):
            yield batch
            batch, new_bytes = [], 0
        batch.append(run_id)
        new_bytes += size - offset
    if batch:
        yield batch


def _ingest_batch(engine: Engine, run_ids: list[str], runs: Mapping[str, tuple[int, int]]) -> list[str]:
    with Session(engine, expire_on_commit=False) as session:
        found = session.exec(select(Run).where(col(Run.id).in_(run_ids))).all()
        for run in found:
            ingest(session, run)
        session.commit()
    return [run.id for run in found if run.log_offset >= runs[run.id][1]]
