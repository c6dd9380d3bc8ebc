"""A run's new output lines, as reading gives them, parsed into records and staged with the run's new offset in the
caller's transaction: a chunk of complete lines (ingest), or a finished run's cut last line (ingest_tail)."""

from __future__ import annotations

import logging
from typing import NamedTuple

from sqlmodel import Session

from contract.records import METRIC_PREFIX, MetricParseError, MetricRecord, parse_metric_line, parse_record_json
from server.config import Settings
from server.models import FIRST_PARSE_ERROR_CHARS, INGEST_STOPPED_CHARS, Run, RunEventKind
from server.runfiles import Unreadable
from server.services import events, flags, hangs, stalls
from server.services.ingestion.reading import MAX_LINE_BYTES, REFUSED, read_cut_line, read_new_lines
from server.services.ingestion.storing import Tally, store_records
from server.services.rundirs import file_owner

log = logging.getLogger(__name__)

_PREFIX = METRIC_PREFIX.encode()
# A line as the worker prints it: the prefix, one space and a JSON object.
_WORKER_LINE = _PREFIX + b" {"
_BODY_AT = len(_PREFIX) + 1


def _fast_parsed(raw: bytes) -> tuple[MetricRecord, str] | None:
    """The record of a line as the worker prints it and the JSON its row holds, without a detour through Python
    objects; None for any other line, which the full parser reads (and says what is wrong with): one that is not
    plainly within a record's bounds included. Reading has left out the lines too long to be a record."""
    if not raw.startswith(_WORKER_LINE):
        return None
    record = parse_record_json(raw[_BODY_AT:])
    if record is None:
        return None
    return record, record.__pydantic_serializer__.to_json(record, exclude_none=True).decode()


def keeps_non_finite(session: Session) -> bool:
    """Whether the session's database can hold a NaN or infinite figure in a record's JSON: SQLite keeps it as
    Python writes it; PostgreSQL's json type refuses it, so there such a line is a parse problem."""
    return session.get_bind().dialect.name == "sqlite"


def _parsed(run: Run, raw: bytes, offset: int, problem: str, non_finite: bool) -> MetricRecord | None:
    """The line's record, or None for a line that is not one; a broken line counts as a parse error, and the first
    one's reason is kept on the run for its owner to read."""
    try:
        return parse_metric_line(raw.decode("utf-8", errors="replace"), keeps_non_finite=non_finite)
    except MetricParseError as exc:
        run.parse_errors += 1
        if run.first_parse_error is None:
            run.first_parse_error = f"{problem} at byte {offset}: {exc}"[:FIRST_PARSE_ERROR_CHARS]
        log.warning("run %s: %s at byte %d: %s", run.id, problem, offset, exc)
        return None


def refuse_output(session: Session, run: Run, problem: Unreadable) -> None:
    """Stop reading the run's output for good, saying why on the run and in one event; the records read before stay.
    Once only: the refused run is not read again (its stored identity says so)."""
    log.warning("run %s: its output is not read on: %s", run.id, problem)
    run.output_file = REFUSED
    run.message = f"scalelab stopped reading this run's output: {problem}. The records read before that are kept."
    if run.state.is_final:
        run.ingest_done = True
    events.record(session, run, RunEventKind.output_refused, str(problem))
    session.add(run)


def ingest_tail(session: Session, run: Run) -> None:
    """A finished run's last line without its newline (the job was killed while printing it): stage its record, or
    count it as a parse error if it was cut inside one; either way the file is read to its end."""
    if run.output_file == REFUSED or run.ingest_stopped is not None:
        return
    try:
        cut = read_cut_line(run.run_dir, run.log_offset, run.output_file, file_owner(run))
    except Unreadable as problem:
        refuse_output(session, run, problem)
        return
    if cut is None:
        return
    run.log_offset, run.output_file = cut.end, cut.identity
    session.add(run)
    if cut.line is None:
        run.parse_errors += 1  # longer than a record can be
        run.first_parse_error = run.first_parse_error or f"its last line is longer than {MAX_LINE_BYTES} bytes"
        return
    record = _parsed(run, cut.line, cut.offset, "its last line was cut short", keeps_non_finite(session))
    if record is not None:
        store_records(session, run, None, [(cut.offset, record)])
        run.records_read += 1


class OutputLimits(NamedTuple):
    """How much of one run's output is read: its records stored, and the bytes read for them (the settings
    max_records_per_run and max_output_bytes_per_run)."""

    records: int
    output_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> OutputLimits:
        return cls(settings.max_records_per_run, settings.max_output_bytes_per_run)


DEFAULT_LIMITS = OutputLimits(
    Settings.model_fields["max_records_per_run"].default, Settings.model_fields["max_output_bytes_per_run"].default
)


def stop(session: Session, run: Run, reason: str) -> None:
    """Stage the end of the run's reading before the end of its output: why, kept on the run (its flag, its
    message if it has none), and an event saying at which byte. The run is read no further."""
    run.ingest_stopped = reason[:INGEST_STOPPED_CHARS]
    run.message = run.message or f"scalelab stopped reading its output: {reason}"
    session.add(run)
    events.record(session, run, RunEventKind.ingest_stopped, f"at byte {run.log_offset}: {reason}")
    log.warning("run %s: its reading stopped at byte %d: %s", run.id, run.log_offset, reason)


def ingest(session: Session, run: Run, limits: OutputLimits = DEFAULT_LIMITS) -> int:
    """Stage the run's new complete records and its new offset in the session; the caller commits both at once.
    At a limit of `limits` the run's reading stops (`stop`): records past it are not stored.

    Returns how many complete lines were read (0: nothing new, or the reading has stopped).
    """
    if run.output_file == REFUSED or run.ingest_stopped is not None:
        return 0
    if run.log_offset >= limits.output_bytes:
        stop(session, run, flags.output_bytes_limit(limits.output_bytes))
        return 0
    try:
        new = read_new_lines(run.run_dir, run.log_offset, run.output_file, file_owner(run))
    except Unreadable as problem:
        refuse_output(session, run, problem)
        return 0
    if new is None:
        return 0
    if new.overlong:
        run.parse_errors += new.overlong
        run.first_parse_error = run.first_parse_error or f"a metric line longer than {MAX_LINE_BYTES} bytes"
    end, room = new.end, limits.records - run.records_read
    if new.metric_lines:
        non_finite = keeps_non_finite(session)
        tally = Tally(session, run)
        progressed = False
        for line_offset, raw in new.metric_lines:
            if room <= 0:
                end = line_offset  # the offset stops at the first record not stored
                break
            fast = _fast_parsed(raw)
            if fast is not None:
                tally.store(line_offset, *fast)
                progressed = progressed or stalls.is_progress(fast[0].kind)
            elif (record := _parsed(run, raw, line_offset, "unreadable metric line", non_finite)) is not None:
                tally.store(line_offset, record)
                progressed = progressed or stalls.is_progress(record.kind)
            else:
                continue
            room -= 1
        stored = limits.records - room - run.records_read
        run.records_read = limits.records - room
        tally.write()
        if stored:
            hangs.records_arrived(run, progressed)
    run.log_offset, run.output_file = end, new.identity
    session.add(run)
    if end < new.end:
        stop(session, run, flags.records_limit(limits.records))
        return 0
    return new.lines_read
