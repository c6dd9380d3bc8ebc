"""A run's records stored in the caller's transaction: their history rows, each record's verdict (whether it counts
after the worker's starts and resumes, by the rule in counting.py) and the run's summary, written a statement per
batch with no ORM object per record."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Float, bindparam, update
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, or_, select

from contract.records import EndRecord, EpochRecord, MetricRecord, ResumeRecord, StartRecord
from server.db_bulk import BulkInsert
from server.models import Metric, Run, RunSummary
from server.services.ingestion.counting import PER_RANK_KINDS, PLACED_KINDS, RULE_KINDS, Place, Standing
from server.services.ingestion.summary import FOLDED_KINDS, apply_record, record_provenance, refold

# How a run's message begins that quotes the worker's own error (its end record): the failure kinds read it.
WORKER_REPORTED = "the worker reported: "
# A batch's records in one statement; a line stored twice is refused by the unique (run_id, offset) key, which
# fails the whole transaction, its records and its offset together, so nothing is ever counted twice.
_RECORDS = BulkInsert(
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
                refold(self.summary, self._counting_epochs())
                refolded = True
        else:
            # Most of a history (steps): no verdict but "counts", and nothing the rule reads again.
            self._staged.append((offset, kind, epoch, text))
        if kind in FOLDED_KINDS and not (refolded and kind == "epoch"):  # the refold has folded the epoch in already
            apply_record(self.summary, record)
        if isinstance(record, StartRecord):
            record_provenance(self.run, record)
        if isinstance(record, EndRecord) and record.error:
            self.run.message = WORKER_REPORTED + record.error

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
