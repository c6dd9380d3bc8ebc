"""Runs: their state, spec and metric records."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlmodel import col, func, select

from server.api.deps import SessionDep
from server.models import Metric, MetricsPublic, Run, RunPublic, RunsPublic, RunState

router = APIRouter(prefix="/api/runs", tags=["runs"])


@router.get("", response_model=RunsPublic, summary="List runs, filtered by experiment and state")
def list_runs(
    session: SessionDep,
    experiment_id: str | None = None,
    state: Annotated[list[RunState] | None, Query(description="one or more states")] = None,
    skip: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> RunsPublic:
    query = select(Run)
    if experiment_id is not None:
        query = query.where(Run.experiment_id == experiment_id)
    if state:
        query = query.where(col(Run.state).in_(state))
    count = session.exec(select(func.count()).select_from(query.subquery())).one()
    runs = session.exec(query.order_by(col(Run.created_at).desc(), col(Run.position)).offset(skip).limit(limit)).all()
    return RunsPublic(data=[RunPublic.model_validate(run) for run in runs], count=count)


def _get(session: SessionDep, run_id: str) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no run {run_id!r}")
    return run


@router.get("/{run_id}", response_model=RunPublic, summary="One run: state, Slurm job id, spec")
def get_run(run_id: str, session: SessionDep) -> RunPublic:
    return RunPublic.model_validate(_get(session, run_id))


@router.get(
    "/{run_id}/metrics",
    response_model=MetricsPublic,
    summary="The run's metric records, as the worker printed them, in order",
)
def get_run_metrics(
    run_id: str,
    session: SessionDep,
    kind: Annotated[str | None, Query(pattern=r"^[a-z_]{1,32}$", description="only records of this kind")] = None,
    skip: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
) -> MetricsPublic:
    _get(session, run_id)
    query = select(Metric).where(Metric.run_id == run_id)
    if kind is not None:
        query = query.where(Metric.kind == kind)
    count = session.exec(select(func.count()).select_from(query.subquery())).one()
    metrics = session.exec(query.order_by(col(Metric.offset)).offset(skip).limit(limit)).all()
    return MetricsPublic.model_validate({"data": [metric.record for metric in metrics], "count": count})
