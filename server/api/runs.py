"""Runs: their state, spec, metric records and output; cancelling them."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response, status
from sqlmodel import Session, col, func, select
from sqlmodel.sql.expression import SelectOfScalar

from contract.spec import Model, RunKind, RunSpec, Strategy
from contract.states import RunState
from server.api.deps import MAX_OFFSET, MAX_SKIP, CurrentUser, ProfilesDep, SchedulerDep, SessionDep, SettingsDep
from server.api.errors import (
    NO_STORAGE,
    NOT_OWNER,
    OVER_QUOTA,
    checked_quotas,
    not_found,
    require_owner,
    service_unavailable,
    storage_error,
)
from server.api.experiments import owner_of, plan_request
from server.models import (
    RESUBMITTABLE_STATES,
    Experiment,
    ExperimentCreate,
    GenerationsPublic,
    Metric,
    MetricsPublic,
    Run,
    RunEvent,
    RunEventBase,
    RunEventsPublic,
    RunLog,
    RunPublic,
    RunsPublic,
)
from server.scheduler import SchedulerError, SchedulerUnavailable
from server.services import rundirs
from server.services.cancellation import RunAlreadyEnded, cancel_run
from server.services.deletion import delete_runs
from server.services.inference import parse_generations
from server.services.submission import RunNotRepeatable, RunNotResubmittable, pinned_image, rerun, resubmit_run

router = APIRouter(prefix="/api/runs", tags=["runs"])
_NO_RUN = not_found("run")


def runs_query(
    experiment_id: str | None = None,
    states: Collection[RunState] = (),
    model: Model | None = None,
    strategy: Strategy | None = None,
    owner: str | None = None,
) -> SelectOfScalar[Run]:
    """The runs that pass these filters, newest first (the API's list and the runs page show the same)."""
    query = select(Run)
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


@router.get(
    "", response_model=RunsPublic, summary="List runs, newest first, by experiment, state, model, strategy and owner"
)
def list_runs(
    session: SessionDep,
    experiment_id: str | None = None,
    state: Annotated[list[RunState] | None, Query(description="one or more states")] = None,
    model: Model | None = None,
    strategy: Strategy | None = None,
    owner: Annotated[str | None, Query(max_length=32, description="only this user's runs")] = None,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> RunsPublic:
    query = runs_query(experiment_id, state or (), model, strategy, owner)
    runs = session.exec(query.offset(skip).limit(limit)).all()
    return RunsPublic(data=[RunPublic.model_validate(run) for run in runs], count=count_of(session, query))


def _get(session: SessionDep, run_id: str) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no run {run_id!r}")
    return run


@router.get("/{run_id}", response_model=RunPublic, summary="One run: state, Slurm job id, spec", responses=_NO_RUN)
def get_run(run_id: str, session: SessionDep) -> RunPublic:
    return RunPublic.model_validate(_get(session, run_id))


@router.get(
    "/{run_id}/metrics",
    response_model=MetricsPublic,
    summary="The run's metric records, as the worker printed them, in order",
    responses=_NO_RUN,
)
def get_run_metrics(
    run_id: str,
    session: SessionDep,
    kind: Annotated[str | None, Query(pattern=r"^[a-z_]{1,32}$", description="only records of this kind")] = None,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
) -> MetricsPublic:
    _get(session, run_id)
    query = select(Metric).where(Metric.run_id == run_id)
    if kind is not None:
        query = query.where(Metric.kind == kind)
    count = session.exec(select(func.count()).select_from(query.subquery())).one()
    metrics = session.exec(query.order_by(col(Metric.offset)).offset(skip).limit(limit)).all()
    return MetricsPublic.model_validate({"data": [metric.record for metric in metrics], "count": count})


@router.get(
    "/{run_id}/log",
    response_model=RunLog,
    summary="The run's output (its output.log) from a byte offset, a bounded piece at a time",
    responses={
        404: {"description": "no such run, or its output is not a file in its own directory"},
        416: {"description": "the offset lies beyond the end of the output"},
    },
)
def get_run_log(
    run_id: str,
    session: SessionDep,
    offset: Annotated[
        int, Query(ge=0, le=MAX_OFFSET, description="byte offset to read from: 0, then the last next_offset")
    ] = 0,
    limit: Annotated[int, Query(ge=1024, le=1024 * 1024, description="the most bytes to return")] = 256 * 1024,
) -> RunLog:
    """To follow a run, ask again from `next_offset` until `complete` is true."""
    run = _get(session, run_id)
    final = run.state.is_final  # read before the file: output written before the end is then all there
    try:
        data, size = rundirs.read_output(Path(run.run_dir), offset, limit)
    except rundirs.OutputUnavailable as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"run {run_id}: {exc}") from None
    if offset > size:
        raise HTTPException(
            status.HTTP_416_RANGE_NOT_SATISFIABLE, f"offset {offset} lies beyond the output's {size} bytes"
        )
    next_offset = offset + len(data)
    return RunLog(
        run_id=run.id,
        offset=offset,
        next_offset=next_offset,
        size=size,
        text=data.decode("utf-8", errors="replace"),
        complete=final and next_offset >= size,
    )


@router.get(
    "/{run_id}/generations",
    response_model=GenerationsPublic,
    summary="An inference run's generations: each prompt and the text generated after it",
    responses={404: {"description": "no such run, it is not an inference run, or its file is not its own"}},
)
def get_run_generations(run_id: str, session: SessionDep) -> GenerationsPublic:
    """Empty, with `complete` false, until the run has written its generations."""
    run = _get(session, run_id)
    if run.spec.get("kind") != RunKind.inference.value:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"run {run_id} is not an inference run: it has no generations")
    try:
        data = rundirs.read_generations(Path(run.run_dir))
    except rundirs.OutputUnavailable as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"run {run_id}: {exc}") from None
    generations = parse_generations(data)
    return GenerationsPublic(run_id=run.id, data=generations, count=len(generations), complete=bool(data))


@router.post(
    "/{run_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RunPublic,
    summary="Cancel a run that has not ended",
    responses={
        **NOT_OWNER,
        **_NO_RUN,
        409: {"description": "the run has already ended"},
        502: {"description": "the scheduler could not cancel the job"},
        503: {"description": "the scheduler cannot be reached; the run is left as it is"},
    },
)
def cancel_one_run(run_id: str, session: SessionDep, scheduler: SchedulerDep, user: CurrentUser) -> RunPublic:
    """A submitted run's job is cancelled through the scheduler, and the run shows as `cancelled` once the
    monitor sees the job end; a run never submitted is cancelled at once. Only the owner or an admin may."""
    run = _get(session, run_id)
    require_owner(user, run.owner, f"run {run_id}")
    try:
        cancel_run(session, run, scheduler)
    except RunAlreadyEnded as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except SchedulerUnavailable as exc:
        raise service_unavailable(f"cannot cancel run {run_id} now: {exc}") from None
    except SchedulerError as exc:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"could not cancel run {run_id}: {exc}") from None
    session.commit()
    return RunPublic.model_validate(run)


@router.post(
    "/{run_id}/resubmit",
    response_model=RunPublic,
    summary="Submit again a run that ended without completing",
    responses={
        **NOT_OWNER,
        **_NO_RUN,
        **OVER_QUOTA,
        409: {"description": "the run is live, or it completed (clone its experiment instead)"},
        503: {"description": "the scheduler cannot be reached; the run is kept as submit_failed"},
    },
)
def resubmit_one_run(
    run_id: str, session: SessionDep, settings: SettingsDep, scheduler: SchedulerDep, user: CurrentUser
) -> RunPublic:
    """Same spec, same batch script, same directory: the worker resumes from the run's last checkpoint if it has
    one. The run's earlier jobs stay in its events. Within a concurrency limit, it waits for a free slot.
    Only the owner or an admin may, within the owner's quotas."""
    run = _get(session, run_id)
    require_owner(user, run.owner, f"run {run_id}")
    experiment = session.get(Experiment, run.experiment_id)
    if experiment is None or run.scheduler == "import":
        raise HTTPException(status.HTTP_409_CONFLICT, f"run {run_id} was imported from a log: it cannot run again")
    if run.state in RESUBMITTABLE_STATES:
        spec = RunSpec.model_validate(run.spec)
        checked_quotas(session, owner_of(session, run.owner, user), settings, [spec], new=False)
    try:
        resubmit_run(session, run, experiment, scheduler)
    except RunNotResubmittable as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except SchedulerUnavailable as exc:
        raise service_unavailable(
            f"{exc}. Run {run_id} is kept as submit_failed: resubmit it once Slurm answers again."
        ) from None
    return RunPublic.model_validate(run)


@router.post(
    "/{run_id}/rerun",
    status_code=status.HTTP_201_CREATED,
    response_model=RunPublic,
    summary="Run again: a new run of the same spec, pinned to the image digest this run ran on",
    responses={
        **NOT_OWNER,
        **_NO_RUN,
        409: {"description": "the run recorded no image digest, or its profile's runtime cannot pin one"},
        422: {"description": "the experiment's request no longer fits its cluster profile"},
        **OVER_QUOTA,
        503: {"description": "the scheduler cannot be reached; the new run is kept as submit_failed"},
        **NO_STORAGE,
    },
)
def rerun_one_run(
    run_id: str,
    session: SessionDep,
    settings: SettingsDep,
    scheduler: SchedulerDep,
    catalog: ProfilesDep,
    user: CurrentUser,
) -> RunPublic:
    """The new run joins the run's experiment with the same spec and the same profile, and its batch script names
    the image by the digest the run recorded, so a moved tag cannot change what runs. The new run's `rerun_of`
    names this one. Only the owner or an admin may, within the owner's quotas."""
    run = _get(session, run_id)
    require_owner(user, run.owner, f"run {run_id}")
    experiment = session.get(Experiment, run.experiment_id)
    if experiment is None or run.scheduler == "import":
        raise HTTPException(status.HTTP_409_CONFLICT, f"run {run_id} was imported from a log: it cannot run again")
    try:
        pinned_image(run)
    except RunNotRepeatable as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    owner = owner_of(session, run.owner, user)
    plan = plan_request(ExperimentCreate.model_validate(experiment.request), session, catalog, scheduler, owner)
    checked_quotas(session, owner, settings, [RunSpec.model_validate(run.spec)], new=True)
    try:
        again = rerun(session, run, experiment, plan, settings, scheduler)
    except RunNotRepeatable as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except SchedulerUnavailable as exc:
        raise service_unavailable(f"{exc}. The new run is kept as submit_failed: resubmit it later.") from None
    except OSError as exc:
        raise storage_error(settings, exc, "nothing was submitted") from None
    return RunPublic.model_validate(again)


@router.get(
    "/{run_id}/events",
    response_model=RunEventsPublic,
    summary="The run's course: submissions, state changes with Slurm's reasons, requeues, cancellations",
    responses=_NO_RUN,
)
def get_run_events(run_id: str, session: SessionDep) -> RunEventsPublic:
    _get(session, run_id)
    events = session.exec(select(RunEvent).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))).all()
    return RunEventsPublic(data=[RunEventBase.model_validate(event) for event in events], count=len(events))


@router.delete(
    "/{run_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a run that has ended: its metrics, events and directory",
    responses={**NOT_OWNER, **_NO_RUN, 409: {"description": "the run has not ended: cancel it first"}},
)
def delete_run(run_id: str, session: SessionDep, user: CurrentUser) -> Response:
    """Only the owner or an admin may. Its experiment stays, with its other runs."""
    run = _get(session, run_id)
    require_owner(user, run.owner, f"run {run_id}")
    if not run.state.is_final:
        raise HTTPException(status.HTTP_409_CONFLICT, f"run {run_id} is {run.state}: cancel it first")
    delete_runs(session, [run])
    return Response(status_code=status.HTTP_204_NO_CONTENT)
