"""Runs as the API and the pages read them: found by id, listed by filters, their records, output and course."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from sqlmodel import Session, col, func, select
from sqlmodel.sql.expression import SelectOfScalar

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
    RunsPublic,
    User,
)
from server.services import rundirs, visibility


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


def count_of(session: Session, query: SelectOfScalar[Run]) -> int:
    return session.exec(select(func.count()).select_from(query.order_by(None).subquery())).one()


def list_runs(session: Session, query: SelectOfScalar[Run], skip: int, limit: int) -> RunsPublic:
    runs = session.exec(query.offset(skip).limit(limit)).all()
    return RunsPublic(data=[RunPublic.model_validate(run) for run in runs], count=count_of(session, query))


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
    query = select(Metric).where(Metric.run_id == run_id)
    if kind is not None:
        query = query.where(Metric.kind == kind)
    if not history:
        query = query.where(col(Metric.counts))
    count = session.exec(select(func.count()).select_from(query.subquery())).one()
    found = session.exec(query.order_by(col(Metric.offset)).offset(skip).limit(limit)).all()
    records = [{**metric.record, "superseded": not metric.counts} if history else metric.record for metric in found]
    return MetricsPublic.model_validate({"data": records, "count": count})


def records_of(session: Session, run_id: str, kinds: Collection[str]) -> list[Metric]:
    """The run's records of these kinds, in output order."""
    query = select(Metric).where(Metric.run_id == run_id, col(Metric.kind).in_(kinds))
    return list(session.exec(query.order_by(col(Metric.offset))).all())


def read_log(session: Session, run_id: str, offset: int, limit: int) -> RunLog:
    """A bounded piece of the run's output from a byte offset; `complete` once nothing more will come."""
    run = get_run(session, run_id)
    final = run.state.is_final  # read before the file: output written before the end is then all there
    try:
        data, size = rundirs.read_output(Path(run.run_dir), offset, limit)
    except rundirs.OutputUnavailable as exc:
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
