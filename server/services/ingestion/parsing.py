"""A run's new output lines, as reading gives them, parsed into records and staged with the run's new offset in the
caller's transaction: a chunk of complete lines (ingest), or a finished run's cut last line (ingest_tail)."""

from __future__ import annotations

import logging

from sqlmodel import Session

from contract.records import METRIC_PREFIX, MetricParseError, MetricRecord, parse_metric_line, parse_record_json
from server.models import Run, RunEventKind
from server.runfiles import Unreadable
from server.services import events
from server.services.ingestion.reading import REFUSED, read_cut_line, read_new_lines
from server.services.ingestion.storing import Tally, store_records, stored_json
from server.services.rundirs import file_owner

log = logging.getLogger(__name__)

_PREFIX = METRIC_PREFIX.encode()
# A line as the worker prints it: the prefix, one space and a JSON object.
_WORKER_LINE = _PREFIX + b" {"
_BODY_AT = len(_PREFIX) + 1


def _fast_parsed(raw: bytes) -> tuple[MetricRecord, str] | None:
    """The record of a line as the worker prints it and the JSON its row holds, without a detour through Python
    objects; None for any other line, which the full parser reads (and says what is wrong with). Reading has left
    out the lines too long to be a record."""
    if not raw.startswith(_WORKER_LINE):
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
    """The line's record, or None for a line that is not one; a broken line counts as a parse error."""
    try:
        return parse_metric_line(raw.decode("utf-8", errors="replace"))
    except MetricParseError as exc:
        run.parse_errors += 1
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
    if run.output_file == REFUSED:
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
        return
    record = _parsed(run, cut.line, cut.offset, "its last line was cut short")
    if record is not None:
        store_records(session, run, None, [(cut.offset, record)])


def ingest(session: Session, run: Run) -> int:
    """Stage the run's new complete records and its new offset in the session; the caller commits both at once.

    Returns how many complete lines were read (0: nothing new).
    """
    if run.output_file == REFUSED:
        return 0
    try:
        new = read_new_lines(run.run_dir, run.log_offset, run.output_file, file_owner(run))
    except Unreadable as problem:
        refuse_output(session, run, problem)
        return 0
    if new is None:
        return 0
    run.parse_errors += new.overlong
    if new.metric_lines:
        tally = Tally(session, run)
        for line_offset, raw in new.metric_lines:
            fast = _fast_parsed(raw)
            if fast is not None:
                tally.store(line_offset, *fast)
                continue
            record = _parsed(run, raw, line_offset, "unreadable metric line")
            if record is not None:
                tally.store(line_offset, record)
        tally.write()
    run.log_offset, run.output_file = new.end, new.identity
    session.add(run)
    return new.lines_read
