"""Runs as the API and the pages read them: found by id, listed by filters, their records, output and course."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import Select, String, cast
from sqlalchemy.sql import Executable
from sqlmodel import Session, col, func, select
from sqlmodel.sql.expression import SelectOfScalar

from contract.records import MetricRecord
from contract.spec import Model, Strategy
from contract.states import RunState
from server.errors import NotFound, OutOfRange
from server.models import (
    Metric,
    MetricsPublic,
    Run,
    RunEvent,
    RunEventBase,
    RunEventsPublic,
    RunLog,
    RunPublic,
    User,
)
from server.runfiles import Unreadable
from server.services import rundirs, secrets, visibility
from server.services.read_cache import Answer, Memo, as_json, finished_version


def get_run(session: Session, run_id: str) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound(f"no run {run_id!r}")
    return run


def runs_query(
    experiment_id: str | None = None,
    states: Collection[RunState] = (),
    model: Model | None = None,
    strategy: Strategy | None = None,
    owner: str | None = None,
    *,
    viewer: User,
) -> SelectOfScalar[Run]:
    """The runs that pass these filters and the viewer may see, newest first (the API's list and the runs page
    show the same)."""
    query = visibility.only_visible(select(Run), viewer, Run.experiment_id)
    if experiment_id is not None:
        query = query.where(Run.experiment_id == experiment_id)
    if owner is not None:
        query = query.where(Run.owner == owner)
    if states:
        query = query.where(col(Run.state).in_(states))
    for key, value in (("model", model), ("strategy", strategy)):
        if value is not None:
            query = query.where(col(Run.spec)[key].as_string() == value.value)
    return query.order_by(col(Run.created_at).desc(), col(Run.position))


def count_of(session: Session, query: Select[*tuple[Any, ...]]) -> int:
    """The rows the query selects, counted by its own FROM and WHERE (not a count over it as a subquery: a statement
    less to build), through the connection, without the ORM's layer."""
    counted = query.with_only_columns(func.count(), maintain_column_froms=True).order_by(None)
    return session.connection().execute(counted).scalar_one()


# A run's JSON is kept under (id, row_version, whether its env values are hidden), as the database bumps row_version
# on every change of the row; a list's whole answer under its rows' keys and its count. Keyed by the whole row as
# read (30 columns, spec included), finding a list's pieces was most of what a kept list of 100 runs still cost.
RunVersion = tuple[str, int, bool]
_VERSION_COLUMNS = (col(Run.id), col(Run.row_version), col(Run.owner))
_run_json: Memo[bytes] = Memo()
_lists: Memo[Answer] = Memo(2_000, weigh=len, budget=64 * 2**20)


def _versions(session: Session, query: Executable, viewer: User) -> list[RunVersion]:
    # Through the connection: three columns as read, without the ORM's layer.
    return [
        (run_id, version, not secrets.may_see_env(viewer, owner))
        for run_id, version, owner in session.connection().execute(query)
    ]


def run_public(run: Run, viewer: User | None) -> RunPublic:
    """A run as the viewer may see it: its program's env values hidden unless the viewer is its owner or an admin."""
    public = RunPublic.model_validate(run)
    shown = secrets.spec_for(viewer, run.owner, public.spec)
    return public if shown is public.spec else public.model_copy(update={"spec": shown})


def _runs_json(session: Session, versions: Sequence[RunVersion], viewer: User) -> list[bytes]:
    """Each run's RunPublic JSON, from those kept; the others read with one more query (a run deleted meanwhile is
    left out). A run changed since its version was read is answered as it is now and kept under the version read,
    which no later reader asks for."""
    found = {version: _run_json.peek(version) for version in versions}
    missing = {run_id: (run_id, version, hidden) for (run_id, version, hidden), json in found.items() if json is None}
    if missing:
        fresh = select(Run).where(col(Run.id).in_(missing)).execution_options(populate_existing=True)
        for run in session.exec(fresh):
            found[missing[run.id]] = made = as_json(run_public(run, viewer))
            _run_json.put(missing[run.id], made)
    return [json for json in (found[version] for version in versions) if json is not None]


def list_runs_answer(session: Session, query: SelectOfScalar[Run], skip: int, limit: int, viewer: User) -> Answer:
    """A page of the query's runs and their count, as RunsPublic's JSON, each as the viewer may see it
    (run_public)."""
    versions = _versions(session, query.with_only_columns(*_VERSION_COLUMNS).offset(skip).limit(limit), viewer)
    count = count_of(session, query)
    return _lists.get(
        (tuple(versions), count), lambda: Answer(_json_list(_runs_json(session, versions, viewer), count))
    )


def _json_list(items: Sequence[bytes], count: int) -> bytes:
    """`{"data": [...], "count": n}` as pydantic writes it (compact), from the items' own JSON."""
    return b'{"data":[' + b",".join(items) + b'],"count":' + str(count).encode() + b"}"


def run_json(session: Session, run_id: str, viewer: User) -> bytes:
    """One run as RunPublic's JSON, if the viewer may see it; NotFound, as for one that does not exist, otherwise."""
    query = visibility.only_visible(select(*_VERSION_COLUMNS).where(Run.id == run_id), viewer, Run.experiment_id)
    found = _runs_json(session, _versions(session, query, viewer), viewer)
    if not found:
        raise NotFound(f"no run {run_id!r}")
    return found[0]


def runs_of_experiment(session: Session, experiment_id: str, states: Collection[RunState] | None = None) -> list[Run]:
    """An experiment's runs in grid order, only those in `states` if given."""
    query = select(Run).where(Run.experiment_id == experiment_id)
    if states is not None:
        query = query.where(col(Run.state).in_(states))
    return list(session.exec(query.order_by(col(Run.position))).all())


def metrics(
    session: Session, run_id: str, kind: str | None, skip: int, limit: int, history: bool = False
) -> MetricsPublic:
    """The run's records as the worker printed them, in output order: those that count (ingestion's verdicts: an
    epoch a resume went back before, or a print of the same figure replaced, does not), or with `history` every
    record, each marked `superseded` or not."""
    get_run(session, run_id)
    # Columns as read, without the ORM's layer: a live run's records are read afresh at every poll, and an ORM object
    # per record was two thirds of what an answer of a few thousand cost.
    query = select(col(Metric.counts)).where(Metric.run_id == run_id)
    if kind is not None:
        query = query.where(Metric.kind == kind)
    if not history:
        query = query.where(col(Metric.counts))
    connection = session.connection()
    count = count_of(session, query)
    page = query.order_by(col(Metric.offset)).offset(skip).limit(limit)
    if history:
        found = connection.execute(page.add_columns(col(Metric.record)))
        records = [{**record, "superseded": not counts} for counts, record in found]
        return MetricsPublic.model_validate({"data": records, "count": count})
    # The records' JSON as stored, parsed and validated by pydantic in one pass: parsing each into a dict first (the
    # JSON type's own reading) cost as much again.
    stored = connection.execute(page.with_only_columns(cast(col(Metric.record), String))).scalars()
    return MetricsPublic.model_construct(data=_RECORDS.validate_json(f"[{','.join(stored)}]"), count=count)


_RECORDS = TypeAdapter(list[MetricRecord])


# Finished runs' records as answered: a run's records are read once, however often its page polls them. Bounded by
# size, since one answer may hold 100,000 records.
_metrics_json: Memo[Answer] = Memo(weigh=len, budget=64 * 2**20)


def metrics_json(
    session: Session, run_id: str, viewer: User, kind: str | None, skip: int, limit: int, history: bool = False
) -> Answer:
    """The same answer as metrics, as MetricsPublic's JSON, if the viewer may see the run (NotFound otherwise)."""
    version = select(Run.attempt, Run.log_offset, Run.ingest_done).where(Run.id == run_id)
    found = session.exec(visibility.only_visible(version, viewer, Run.experiment_id)).first()
    if found is None:
        raise NotFound(f"no run {run_id!r}")
    finished = finished_version(run_id, *found)

    def make() -> Answer:
        return Answer(as_json(metrics(session, run_id, kind, skip, limit, history)))

    return make() if finished is None else _metrics_json.get((finished, kind, skip, limit, history), make)


def records_of(session: Session, run_id: str, kinds: Collection[str]) -> list[Metric]:
    """The run's records of these kinds, in output order."""
    query = select(Metric).where(Metric.run_id == run_id, col(Metric.kind).in_(kinds))
    return list(session.exec(query.order_by(col(Metric.offset))).all())


def read_log(session: Session, run_id: str, offset: int, limit: int) -> RunLog:
    """A bounded piece of the run's output from a byte offset; `complete` once nothing more will come."""
    run = get_run(session, run_id)
    final = run.state.is_final  # read before the file: output written before the end is then all there
    try:
        data, size = rundirs.read_output(Path(run.run_dir), offset, limit, rundirs.file_owner(run))
    except Unreadable as exc:
        raise NotFound(f"run {run_id}: {exc}") from None
    if offset > size:
        raise OutOfRange(f"offset {offset} lies beyond the output's {size} bytes")
    next_offset = offset + len(data)
    return RunLog(
        run_id=run.id,
        offset=offset,
        next_offset=next_offset,
        size=size,
        text=data.decode("utf-8", errors="replace"),
        complete=final and next_offset >= size,
    )


def events_of(session: Session, run_id: str) -> list[RunEvent]:
    return list(session.exec(select(RunEvent).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))).all())


def events(session: Session, run_id: str) -> RunEventsPublic:
    get_run(session, run_id)
    found = events_of(session, run_id)
    return RunEventsPublic(data=[RunEventBase.model_validate(event) for event in found], count=len(found))
