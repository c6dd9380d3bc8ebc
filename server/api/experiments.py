"""Experiments: preview and submit a grid of runs, list them, compare and export their runs, cancel them."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response, status
from fastapi.exceptions import RequestValidationError
from sqlmodel import Session, col, func, select

from server.api.deps import SchedulerDep, SessionDep, SettingsDep
from server.cancellation import cancel_run
from server.comparison import compare_csv, compare_rows
from server.config import Settings
from server.models import (
    FINAL_STATES,
    ComparePublic,
    Experiment,
    ExperimentCreate,
    ExperimentCreated,
    ExperimentPreview,
    ExperimentPublic,
    ExperimentsPublic,
    Run,
    RunPublic,
    RunsPublic,
)
from server.scheduler import SchedulerError
from server.submission import create_experiment, preview_script
from server.sweep import SweepError, expand

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/experiments", tags=["experiments"])


def _state_counts(session: Session, experiment_ids: list[str]) -> dict[str, dict[str, int]]:
    """Runs per state for each experiment, in one grouped query however many experiments are listed."""
    rows = session.exec(
        select(Run.experiment_id, Run.state, func.count())
        .where(col(Run.experiment_id).in_(experiment_ids))
        .group_by(col(Run.experiment_id), col(Run.state))
    ).all()
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for experiment_id, state, n in rows:
        counts[experiment_id][str(state)] = n
    return counts


def _with_counts(experiment: Experiment, states: dict[str, int]) -> ExperimentPublic:
    return ExperimentPublic.model_validate(experiment, update={"run_count": sum(states.values()), "states": states})


def experiment_public(session: Session, experiment: Experiment) -> ExperimentPublic:
    return _with_counts(experiment, _state_counts(session, [experiment.id])[experiment.id])


def _get(session: Session, experiment_id: str) -> Experiment:
    experiment = session.get(Experiment, experiment_id)
    if experiment is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no experiment {experiment_id!r}")
    return experiment


def experiment_created(session: Session, experiment: Experiment, runs: list[Run]) -> ExperimentCreated:
    public = experiment_public(session, experiment)
    return ExperimentCreated(**public.model_dump(), runs=[RunPublic.model_validate(run) for run in runs])


def invalid(problems: Iterable[tuple[tuple[str | int, ...], str]]) -> RequestValidationError:
    """A 422 shaped like pydantic's, for problems found after the request itself validated: (location, message)."""
    return RequestValidationError(
        [{"type": "value_error", "loc": loc, "msg": message, "input": None} for loc, message in problems]
    )


def storage_error(settings: Settings, exc: OSError, outcome: str) -> HTTPException:
    log.error("cannot write run directories under %s: %s", settings.runs_dir, exc)
    return HTTPException(
        status.HTTP_507_INSUFFICIENT_STORAGE,
        f"cannot write the run directories ({exc.strerror}); {outcome}. "
        "Ask the operator to check the runs directory's space and permissions.",
    )


def _grid_errors(exc: SweepError) -> RequestValidationError:
    return invalid((("body", "grid"), problem) for problem in exc.problems)


_INVALID: dict[int | str, dict[str, Any]] = {
    422: {"description": "a field is invalid, or some grid combinations cannot run (each is named)"}
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ExperimentCreated,
    summary="Submit an experiment",
    responses=_INVALID,
)
def submit_experiment(
    request: ExperimentCreate, session: SessionDep, settings: SettingsDep, scheduler: SchedulerDep
) -> ExperimentCreated:
    """Expand the grid into runs, write each run's spec and batch script, and submit every run.

    Runs the scheduler refuses are kept in state `submit_failed` with the scheduler's message.
    """
    try:
        experiment, runs = create_experiment(session, request, settings, scheduler)
    except SweepError as exc:
        raise _grid_errors(exc) from None
    except OSError as exc:
        raise storage_error(settings, exc, "nothing was submitted") from None
    return experiment_created(session, experiment, runs)


@router.post(
    "/preview",
    response_model=ExperimentPreview,
    summary="Preview an experiment: its runs and the first run's batch script, submitting nothing",
    responses=_INVALID,
)
def preview_experiment(request: ExperimentCreate, settings: SettingsDep, scheduler: SchedulerDep) -> ExperimentPreview:
    """Validate and expand the request exactly as submitting it would, but write and submit nothing."""
    try:
        specs = expand(request.base, request.grid, request.resources.nodes)
    except SweepError as exc:
        raise _grid_errors(exc) from None
    script = preview_script(specs[0], request.resources.time_limit, settings, scheduler)
    return ExperimentPreview(name=request.name, runs=specs, count=len(specs), script=script)


@router.get("", response_model=ExperimentsPublic, summary="List experiments, newest first")
def list_experiments(
    session: SessionDep,
    skip: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ExperimentsPublic:
    count = session.exec(select(func.count()).select_from(Experiment)).one()
    experiments = session.exec(
        select(Experiment).order_by(col(Experiment.created_at).desc()).offset(skip).limit(limit)
    ).all()
    counts = _state_counts(session, [e.id for e in experiments])
    return ExperimentsPublic(data=[_with_counts(e, counts[e.id]) for e in experiments], count=count)


@router.get("/{experiment_id}", response_model=ExperimentPublic, summary="One experiment")
def get_experiment(experiment_id: str, session: SessionDep) -> ExperimentPublic:
    return experiment_public(session, _get(session, experiment_id))


@router.get(
    "/{experiment_id}/compare",
    response_model=ComparePublic,
    summary="One row per run: epoch time, speed-up, efficiency, final loss and accuracy, peak memory",
)
def compare_experiment(experiment_id: str, session: SessionDep) -> ComparePublic:
    _get(session, experiment_id)
    rows = compare_rows(session, experiment_id)
    return ComparePublic(experiment_id=experiment_id, data=rows, count=len(rows))


@router.get(
    "/{experiment_id}/compare.csv",
    response_class=Response,
    summary="The comparison rows as CSV, one line per run, with a header of the field names",
    responses={200: {"content": {"text/csv": {}}, "description": "the rows of /compare as CSV"}},
)
def compare_experiment_csv(experiment_id: str, session: SessionDep) -> Response:
    experiment = _get(session, experiment_id)
    filename = f"scalelab-{experiment.id}.csv"  # server-made id: safe in a header
    return Response(
        compare_csv(compare_rows(session, experiment_id)),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.post(
    "/{experiment_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RunsPublic,
    summary="Cancel every run of the experiment that has not ended",
    responses={
        409: {"description": "every run has already ended"},
        502: {"description": "the scheduler could not cancel some jobs (each is named); the others were cancelled"},
    },
)
def cancel_experiment(experiment_id: str, session: SessionDep, scheduler: SchedulerDep) -> RunsPublic:
    """Jobs are cancelled through the scheduler and show as `cancelled` once the monitor sees them end;
    runs never submitted are cancelled at once. Returns the runs asked to stop."""
    _get(session, experiment_id)
    runs = session.exec(
        select(Run)
        .where(Run.experiment_id == experiment_id, col(Run.state).not_in(FINAL_STATES))
        .order_by(col(Run.position))
    ).all()
    if not runs:
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"every run of experiment {experiment_id} has already ended; nothing to cancel"
        )
    failures = []
    for run in runs:
        try:
            cancel_run(session, run, scheduler)
        except SchedulerError as exc:
            failures.append(f"run {run.id}: {exc}")
    session.commit()
    if failures:
        raise HTTPException(
            status.HTTP_502_BAD_GATEWAY,
            f"could not cancel {len(failures)} of {len(runs)} runs (the others were): " + "; ".join(failures),
        )
    return RunsPublic(data=[RunPublic.model_validate(run) for run in runs], count=len(runs))
