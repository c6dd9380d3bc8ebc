"""Experiments: submit a grid of runs, list them, compare their runs."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.exceptions import RequestValidationError
from sqlmodel import Session, col, func, select

from server.api.deps import SchedulerDep, SessionDep, SettingsDep
from server.comparison import compare_rows
from server.models import (
    ComparePublic,
    Experiment,
    ExperimentCreate,
    ExperimentCreated,
    ExperimentPublic,
    ExperimentsPublic,
    Run,
    RunPublic,
)
from server.submission import create_experiment
from server.sweep import SweepError

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/experiments", tags=["experiments"])


def _public(session: Session, experiment: Experiment) -> ExperimentPublic:
    states = Counter(session.exec(select(Run.state).where(Run.experiment_id == experiment.id)).all())
    return ExperimentPublic.model_validate(
        experiment,
        update={"run_count": sum(states.values()), "states": {str(state): n for state, n in states.items()}},
    )


def _get(session: Session, experiment_id: str) -> Experiment:
    experiment = session.get(Experiment, experiment_id)
    if experiment is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no experiment {experiment_id!r}")
    return experiment


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ExperimentCreated,
    summary="Submit an experiment",
    responses={422: {"description": "a field is invalid, or some grid combinations cannot run (each is named)"}},
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
        raise RequestValidationError(
            [
                {"type": "value_error", "loc": ("body", "grid"), "msg": problem, "input": None}
                for problem in exc.problems
            ]
        ) from None
    except OSError as exc:
        log.error("cannot write run directories under %s: %s", settings.runs_dir, exc)
        raise HTTPException(
            status.HTTP_507_INSUFFICIENT_STORAGE,
            f"cannot write the run directories ({exc.strerror}); nothing was submitted. "
            "Ask the operator to check the runs directory's space and permissions.",
        ) from None
    public = _public(session, experiment)
    return ExperimentCreated(**public.model_dump(), runs=[RunPublic.model_validate(run) for run in runs])


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
    return ExperimentsPublic(data=[_public(session, e) for e in experiments], count=count)


@router.get("/{experiment_id}", response_model=ExperimentPublic, summary="One experiment")
def get_experiment(experiment_id: str, session: SessionDep) -> ExperimentPublic:
    return _public(session, _get(session, experiment_id))


@router.get(
    "/{experiment_id}/compare",
    response_model=ComparePublic,
    summary="One row per run: epoch time, speed-up, efficiency, final loss and accuracy, peak memory",
)
def compare_experiment(experiment_id: str, session: SessionDep) -> ComparePublic:
    _get(session, experiment_id)
    rows = compare_rows(session, experiment_id)
    return ComparePublic(experiment_id=experiment_id, data=rows, count=len(rows))
