"""Logs of runs made outside scalelab, read into a new experiment: every file is read, or nothing is kept."""

from __future__ import annotations

from collections.abc import Iterable
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
from contract.spec import RunSpec
from contract.states import RunState
from server.config import Settings
from server.errors import Invalid
from server.models import Experiment, ImportCreate, Run, RunSummary
from server.services import rundirs
from server.services.ingestion.reading import MAX_LINE_BYTES
from server.services.ingestion.storing import store_record
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


@dataclass(frozen=True)
class ParsedLog:
    output: str  # the text kept as the run's output, every line ending in a newline
    records: tuple[tuple[int, MetricRecord], ...]  # (byte offset of the line, its record)
    spec: RunSpec
    state: RunState


def parse_log(content: str) -> ParsedLog:
    """The records of one log and the run they describe; ValueError says why the log cannot be imported."""
    # Lone surrogates can arrive in JSON strings; they cannot be stored as UTF-8.
    data = content.encode("utf-8", errors="replace")
    if data and not data.endswith(b"\n"):
        data += b"\n"
    records: list[tuple[int, MetricRecord]] = []
    problems: list[str] = []
    offset = 0
    # Lines split as the monitor splits them, so offsets mean the same in imported and followed runs.
    for number, raw in enumerate(data.splitlines(keepends=True), start=1):
        line_offset, offset = offset, offset + len(raw)
        if len(raw) > MAX_LINE_BYTES:
            problems.append(f"line {number}: longer than {MAX_LINE_BYTES} bytes")
            continue
        try:
            record = parse_metric_line(raw.decode("utf-8", errors="replace"))
        except MetricParseError as exc:
            problems.append(f"line {number}: {exc}")
            continue
        if record is not None:
            records.append((line_offset, record))
    if problems:
        more = f" (and {len(problems) - LINES_NAMED} more)" if len(problems) > LINES_NAMED else ""
        raise ValueError(f"unreadable metric lines: {'; '.join(problems[:LINES_NAMED])}{more}")
    if not records:
        raise ValueError(f"no {METRIC_PREFIX} records")
    found = [record for _, record in records]
    return ParsedLog(data.decode("utf-8"), tuple(records), infer_spec(found), _state(found))


def _setup_hints(records: Iterable[MetricRecord]) -> dict[str, Any]:
    """What the records say about how the run was set up; the first mention of a key counts."""
    hints: dict[str, Any] = {}
    for record in records:
        if isinstance(record, StartRecord):
            found: dict[str, Any] = {"world_size": record.world_size, "nodes": record.nodes}
            found["strategy"] = record.strategy
        elif isinstance(record, LegacyRecord):
            found = dict(record.values)
        elif isinstance(record, EpochRecord):
            found = dict(record.model_extra or {})  # a course script's extra key=value pairs on the epoch line
        else:
            continue
        for key, value in found.items():
            hints.setdefault(key, value)
    return hints


def infer_spec(records: list[MetricRecord]) -> RunSpec:
    """The run spec a log describes: what its records tell, defaults for the rest.

    Raises ValueError when what they tell is not a spec scalelab can describe.
    """
    hints = _setup_hints(records)
    fields = {key: value for key, value in hints.items() if key in RunSpec.model_fields}
    if "gpus" not in fields and "world_size" in hints:
        fields["gpus"] = hints["world_size"]
    epochs = [record.epoch for record in records if isinstance(record, EpochRecord)]
    if "epochs" not in fields and epochs:
        fields["epochs"] = max(epochs)
    gpus = fields.get("gpus", 1)
    if "global_batch_size" not in fields and isinstance(gpus, int | float) and gpus >= 1:
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


def _state(records: list[MetricRecord]) -> RunState:
    ends = [record for record in records if isinstance(record, EndRecord)]
    return RunState.completed if not ends or ends[-1].status == "completed" else RunState.failed


def import_logs(
    session: Session, request: ImportCreate, settings: Settings, owner: str
) -> tuple[Experiment, list[Run]]:
    """One experiment with one finished run per file, in one transaction.

    Raises ImportRefused before anything is written if any file cannot be read. If writing fails, nothing is kept
    (neither rows nor directories) and StorageFailed says so.
    """
    parsed: list[ParsedLog] = []
    problems: dict[int, str] = {}
    for index, file in enumerate(request.files):
        try:
            parsed.append(parse_log(file.content))
        except ValueError as exc:
            problems[index] = f"{file.name}: {exc}"
    if problems:
        raise ImportRefused(problems)
    files = [file.name for file in request.files]
    experiment = Experiment(
        name=request.name, owner=owner, request={"name": request.name, "source": SCHEDULER, "files": files}
    )
    runs: list[Run] = []
    try:
        with committed_with_directories(session, runs):
            session.add(experiment)
            session.flush()  # the rows are in no relationship, so nothing else orders parents before children
            for position, log in enumerate(parsed):
                runs.append(_imported_run(session, experiment, position, log, settings))
    except OSError as exc:
        raise rundirs.unwritable(settings.runs_dir, exc, "nothing was imported") from None
    session.refresh(experiment)
    for run in runs:
        session.refresh(run)
    return experiment, runs


def _imported_run(session: Session, experiment: Experiment, position: int, log: ParsedLog, settings: Settings) -> Run:
    run = Run(
        experiment_id=experiment.id,
        owner=experiment.owner,
        position=position,
        created_at=experiment.created_at,
        ended_at=experiment.created_at,
        scheduler=SCHEDULER,
        origin="imported",
        state=log.state,
        spec=log.spec.model_dump(mode="json"),
        run_dir="",
        # Kept as the run's output so that its log reads like any other; the monitor has nothing left to read.
        log_offset=len(log.output.encode("utf-8")),
        ingest_done=True,
    )
    run_dir = rundirs.path(settings.runs_dir, run.id)
    run.run_dir = str(run_dir)
    session.add(run)
    session.flush()
    summary = RunSummary(run_id=run.id)
    for offset, record in log.records:
        store_record(session, run, summary, offset, record)
    session.add(summary)
    # The directory last: a failure before it leaves no directory behind, one after it is the caller's to undo.
    # Only the service reads an imported run (no job does): on a shared instance, where anyone may create entries in
    # the runs directory, nobody else may read the log, whoever learns its id.
    rundirs.create(settings.runs_dir, run.id, mode=0o750)
    try:
        rundirs.write_new(run_dir / SPEC_FILE, log.spec.model_dump_json(indent=2) + "\n", mode=0o640)
        rundirs.write_new(run_dir / OUTPUT_FILE, log.output, mode=0o640)
    except BaseException:
        rundirs.remove(run_dir)
        raise
    return run
