"""Logs of runs made outside scalelab, read into a new experiment: every file is read, or nothing is kept."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlmodel import Session

from contract.records import (
    METRIC_PREFIX,
    EndRecord,
    EpochRecord,
    LegacyRecord,
    MetricParseError,
    MetricRecord,
    StartRecord,
    parse_metric_line,
)
from contract.rundir import OUTPUT_FILE, SPEC_FILE
from contract.spec import RunKind, RunSpec
from contract.states import RunState
from server.config import Settings
from server.errors import Invalid
from server.models import Experiment, ImportCreate, Run, RunSummary, User
from server.services import fabric, rundirs
from server.services.ingestion.reading import MAX_LINE_BYTES
from server.services.ingestion.storing import store_records
from server.services.quotas import check_import_quota
from server.services.submission import committed_with_directories

# What an imported run's `scheduler` says, as the API always showed it, and its experiment's request its source: it
# had no job, so the monitor never asks a backend about it. What may be done to it is read from its origin.
SCHEDULER = "import"
# An error names this many unreadable lines of a file and counts the rest.
LINES_NAMED = 3


class ImportRefused(Invalid):
    """Some files cannot be imported; each problem names the file's content in the request, and why."""

    def __init__(self, problems: dict[int, str]) -> None:
        super().__init__((("body", "files", index, "content"), problem) for index, problem in problems.items())


# Records of one log handed to the database at once: what an import holds in memory, whatever the size of its logs.
BATCH_RECORDS = 2000


def _lines(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(number from 1, byte offset, line) of each line of `data`, split as the monitor splits them (a newline, a
    carriage return or both end a line), one at a time."""
    number = offset = 0
    while offset < len(data):
        newline = data.find(b"\n", offset)
        segment = data[offset:] if newline < 0 else data[offset : newline + 1]
        for raw in segment.splitlines(keepends=True):
            number += 1
            yield number, offset, raw
            offset += len(raw)


class LogReader:
    """One log read line by line: its records handed on as they come, never all held; what they tell of the run
    (the set-up they mention, their epochs, how it ended) folded as they pass, and the lines that cannot be read
    counted, the first LINES_NAMED named."""

    def __init__(self, *, keeps_non_finite: bool = False, max_records: int | None = None) -> None:
        self.keeps_non_finite, self.max_records = keeps_non_finite, max_records
        self.hints: dict[str, Any] = {}
        self.last_epoch: int | None = None
        self.end: EndRecord | None = None
        self.records = 0
        self.problems: list[str] = []
        self.unreadable = 0

    def records_of(self, data: bytes) -> Iterator[tuple[int, MetricRecord]]:
        """(byte offset of the line, its record) of each readable record line of `data`."""
        for number, line_offset, raw in _lines(data):
            if len(raw) > MAX_LINE_BYTES:
                self._problem(f"line {number}: longer than {MAX_LINE_BYTES} bytes")
                continue
            try:
                record = parse_metric_line(
                    raw.decode("utf-8", errors="replace"), keeps_non_finite=self.keeps_non_finite
                )
            except MetricParseError as exc:
                self._problem(f"line {number}: {exc}")
                continue
            if record is None:
                continue
            self.records += 1
            if self.max_records is not None and self.records > self.max_records:
                self._problem(f"more than {self.max_records} records, the most a run may hold: import a part of it")
                return
            self._fold(record)
            yield line_offset, record

    def _problem(self, problem: str) -> None:
        self.unreadable += 1
        if len(self.problems) < LINES_NAMED:
            self.problems.append(problem)

    def _fold(self, record: MetricRecord) -> None:
        """What the record tells of how the run was set up (the first mention of a key counts) and how it went."""
        if isinstance(record, StartRecord):
            found: dict[str, Any] = {"world_size": record.world_size, "nodes": record.nodes}
            # A fabric probe's start names the probe where a training run names its strategy.
            found["kind" if record.strategy == RunKind.probe else "strategy"] = record.strategy
        elif isinstance(record, LegacyRecord):
            found = dict(record.values)
        elif isinstance(record, EpochRecord):
            found = dict(record.model_extra or {})  # a course script's extra key=value pairs on the epoch line
            self.last_epoch = max(self.last_epoch or record.epoch, record.epoch)
        else:
            found = {}
            if isinstance(record, EndRecord):
                self.end = record
        for key, value in found.items():
            self.hints.setdefault(key, value)

    def verdict(self) -> tuple[RunSpec, RunState]:
        """The run the log describes and how it ended; ValueError says why the log cannot be imported."""
        if self.problems:
            more = f" (and {self.unreadable - LINES_NAMED} more)" if self.unreadable > LINES_NAMED else ""
            raise ValueError(f"unreadable metric lines: {'; '.join(self.problems)}{more}")
        if not self.records:
            raise ValueError(f"no {METRIC_PREFIX} records")
        state = RunState.completed if self.end is None or self.end.status == "completed" else RunState.failed
        return _spec(self.hints, self.last_epoch), state


@dataclass(frozen=True)
class ParsedLog:
    output: str  # the text kept as the run's output, every line ending in a newline
    records: tuple[tuple[int, MetricRecord], ...]  # (byte offset of the line, its record)
    spec: RunSpec
    state: RunState


def _output(content: str) -> bytes:
    """The text kept as a run's output: UTF-8, every line ending in a newline."""
    # Lone surrogates can arrive in JSON strings; they cannot be stored as UTF-8.
    data = content.encode("utf-8", errors="replace")
    return data + b"\n" if data and not data.endswith(b"\n") else data


def parse_log(content: str) -> ParsedLog:
    """The records of one log, all of them, and the run they describe; ValueError says why the log cannot be
    imported. (An import itself reads its logs with LogReader, a batch of records at a time.)"""
    data = _output(content)
    reader = LogReader()
    records = tuple(reader.records_of(data))
    spec, state = reader.verdict()
    return ParsedLog(data.decode("utf-8"), records, spec, state)


def _spec(hints: dict[str, Any], last_epoch: int | None) -> RunSpec:
    """The run spec a log describes: what its records tell, defaults for the rest.

    Raises ValueError when what they tell is not a spec scalelab can describe.
    """
    fields = {key: value for key, value in hints.items() if key in RunSpec.model_fields}
    if "gpus" not in fields and "world_size" in hints:
        fields["gpus"] = hints["world_size"]
    if "epochs" not in fields and last_epoch is not None:
        fields["epochs"] = last_epoch
    gpus = fields.get("gpus", 1)
    reads_batch = fields.get("kind") != RunKind.probe
    if "global_batch_size" not in fields and reads_batch and isinstance(gpus, int | float) and gpus >= 1:
        # The log does not tell the batch: the default, rounded up so that it divides among the processes.
        default = RunSpec.model_fields["global_batch_size"].default
        fields["global_batch_size"] = -(-default // int(gpus)) * int(gpus)
    try:
        return RunSpec.model_validate(fields)
    except ValidationError as exc:
        reasons = "; ".join(
            ".".join(str(part) for part in error["loc"]) + ": " + error["msg"].removeprefix("Value error, ")
            if error["loc"]
            else error["msg"].removeprefix("Value error, ")
            for error in exc.errors()
        )
        raise ValueError(f"the run it describes is not one scalelab can hold: {reasons}") from None


def import_logs(
    session: Session, request: ImportCreate, settings: Settings, user: User
) -> tuple[Experiment, list[Run]]:
    """One experiment with one finished run per file, in one transaction, counted toward the user's runs a day.

    Each file is read line by line and its records stored a batch at a time as they are read (never every record of
    every file at once). Raises QuotaExceeded before anything is read, ImportRefused (naming every file that cannot
    be read) with nothing kept; if writing fails, nothing is kept (neither rows nor directories) and StorageFailed
    says so.
    """
    check_import_quota(session, user, settings, len(request.files))
    keeps_non_finite = session.get_bind().dialect.name == "sqlite"
    files = [file.name for file in request.files]
    experiment = Experiment(
        name=request.name, owner=user.name, request={"name": request.name, "source": SCHEDULER, "files": files}
    )
    runs: list[Run] = []
    problems: dict[int, str] = {}
    try:
        with committed_with_directories(session, runs):
            session.add(experiment)
            session.flush()  # the rows are in no relationship, so nothing else orders parents before children
            for position, file in enumerate(request.files):
                reader = LogReader(keeps_non_finite=keeps_non_finite, max_records=settings.max_records_per_run)
                data = _output(file.content)
                try:
                    if problems:  # nothing more will be kept: the rest of the files are only read, for their problems
                        for _ in reader.records_of(data):
                            pass
                        reader.verdict()
                    else:
                        runs.append(_imported_run(session, experiment, position, data, reader, settings))
                except ValueError as exc:
                    problems[position] = f"{file.name}: {exc}"
            if problems:
                raise ImportRefused(problems)  # rolled back: nothing was kept
    except OSError as exc:
        raise rundirs.unwritable(settings.runs_dir, exc, "nothing was imported") from None
    session.refresh(experiment)
    for run in runs:
        session.refresh(run)
    return experiment, runs


def _imported_run(
    session: Session, experiment: Experiment, position: int, data: bytes, reader: LogReader, settings: Settings
) -> Run:
    """The log's run, its records stored a batch at a time as the reader reads them; ValueError (from the reader,
    with the transaction's rows to be rolled back by the caller) if the log cannot be imported."""
    run = Run(
        experiment_id=experiment.id,
        owner=experiment.owner,
        position=position,
        created_at=experiment.created_at,
        ended_at=experiment.created_at,
        scheduler=SCHEDULER,
        origin="imported",
        state=RunState.completed,
        spec={},  # what the records tell, once they are all read
        run_dir="",
        # Kept as the run's output so that its log reads like any other; the monitor has nothing left to read.
        log_offset=len(data),
        ingest_done=True,
    )
    run_dir = rundirs.path(settings.runs_dir, run.id)
    run.run_dir = str(run_dir)
    session.add(run)
    session.flush()
    summary = RunSummary(run_id=run.id)
    session.add(summary)
    batch: list[tuple[int, MetricRecord]] = []
    for found in reader.records_of(data):
        batch.append(found)
        if len(batch) == BATCH_RECORDS:
            store_records(session, run, summary, batch)
            batch = []
    if batch:
        store_records(session, run, summary, batch)
    spec, run.state = reader.verdict()
    run.spec = spec.model_dump(mode="json")
    run.records_read = reader.records
    session.add(run)
    fabric.conclude(session, run)  # an imported probe's measurements are kept as a probe run's are
    # The directory last: a failure before it leaves no directory behind, one after it is the caller's to undo.
    # Only the service reads an imported run (no job does): on a shared instance, where anyone may create entries in
    # the runs directory, nobody else may read the log, whoever learns its id.
    rundirs.create(settings.runs_dir, run.id, mode=0o750)
    try:
        rundirs.write_new(run_dir / SPEC_FILE, spec.model_dump_json(indent=2) + "\n", mode=0o640)
        rundirs.write_new(run_dir / OUTPUT_FILE, data.decode("utf-8"), mode=0o640)
    except BaseException:
        rundirs.remove(run_dir)
        raise
    return run
