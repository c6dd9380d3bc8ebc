"""Comparisons of any selection of runs: whole experiments, single runs, or both together."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from server.api.deps import CurrentUser, SessionDep
from server.api.downloads import csv_download
from server.api.errors import not_found
from server.api.prepared import kept_answer
from server.models import ComparePublic, PredictionPublic, ScalingPublic
from server.services.comparison import (
    MAX_COMPARED_EXPERIMENTS,
    MAX_COMPARED_RUNS,
    compare_answer,
    compare_csv,
    scaling,
    selected_rows,
)
from server.services.comparison.predicted import prediction
from server.services.comparison.selection import checked_selection
from server.services.visibility import visible_experiment

router = APIRouter(prefix="/api", tags=["compare"])

RunIds = Annotated[
    list[str],
    Query(alias="run_id", max_length=MAX_COMPARED_RUNS, description="runs to compare (repeat the parameter)"),
]
ExperimentIds = Annotated[
    list[str],
    Query(
        alias="experiment_id",
        max_length=MAX_COMPARED_EXPERIMENTS,
        description="experiments whose runs are all compared (repeat the parameter)",
    ),
]


@router.get(
    "/compare",
    response_model=ComparePublic,
    summary="Runs side by side: epoch time, speed-up and efficiency within the selection, loss, accuracy, memory",
    responses={422: {"description": "no run or experiment named, too many runs, or some named do not exist"}},
)
def compare(
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    run_ids: RunIds = [],  # noqa: B006 (FastAPI copies query defaults)
    experiment_ids: ExperimentIds = [],  # noqa: B006
    history: Annotated[bool, Query(description="also each run's epochs: losses, accuracy, epoch time")] = False,
) -> Response:
    """Series are runs alike but for GPUs and nodes; each one's baseline is its timed run with the fewest GPUs."""
    return kept_answer(compare_answer(session, experiment_ids, run_ids, user, history), request)


@router.get(
    "/compare.csv",
    response_class=Response,
    summary="The same rows as CSV, one line per run, with a header of the field names",
    responses={200: {"content": {"text/csv": {}}, "description": "the rows of /api/compare as CSV"}},
)
def compare_as_csv(
    session: SessionDep,
    user: CurrentUser,
    run_ids: RunIds = [],  # noqa: B006
    experiment_ids: ExperimentIds = [],  # noqa: B006
) -> Response:
    rows = selected_rows(session, experiment_ids, run_ids, user)
    name = experiment_ids[0] if len(experiment_ids) == 1 and not run_ids else "selection"
    return csv_download(compare_csv(rows), f"scalelab-{name}.csv")


@router.get(
    "/scaling",
    response_model=ScalingPublic,
    summary="The scaling analysis of a selection: per series its points with intervals, fitted laws, predictions",
    responses={422: {"description": "no run or experiment named, too many runs, or some named do not exist"}},
)
def scaling_of_selection(
    session: SessionDep,
    user: CurrentUser,
    run_ids: RunIds = [],  # noqa: B006
    experiment_ids: ExperimentIds = [],  # noqa: B006
) -> ScalingPublic:
    """Series and points as /api/compare forms them; a law is fitted to a series with 3 GPU counts or more."""
    only = experiment_ids[0] if len(experiment_ids) == 1 and not run_ids else None
    return scaling(selected_rows(session, experiment_ids, run_ids, user), only)


PREDICTION_SUMMARY = (
    "The step model per series: predicted step and epoch time, speed-up, efficiency and their parts (compute, "
    "exposed communication, pipeline bubble) from a 1-process run and the fabric's fits, each measured point's residual"
)


@router.get(
    "/prediction",
    response_model=PredictionPublic,
    summary=PREDICTION_SUMMARY,
    responses={422: {"description": "no run or experiment named, too many runs, or some named do not exist"}},
)
def prediction_of_selection(
    session: SessionDep,
    user: CurrentUser,
    run_ids: RunIds = [],  # noqa: B006
    experiment_ids: ExperimentIds = [],  # noqa: B006
) -> PredictionPublic:
    """Series as /api/compare forms them; a series without a finished 1-process run, or a point without a fabric fit
    for its shape, says so instead of a number."""
    only = experiment_ids[0] if len(experiment_ids) == 1 and not run_ids else None
    return prediction(session, checked_selection(session, experiment_ids, run_ids, user), only)


@router.get(
    "/experiments/{experiment_id}/prediction",
    response_model=PredictionPublic,
    summary=PREDICTION_SUMMARY + " (one experiment)",
    responses=not_found("experiment"),
)
def prediction_of_experiment(session: SessionDep, user: CurrentUser, experiment_id: str) -> PredictionPublic:
    """Available as soon as the experiment's 1-process run has finished, before any multi-process run has."""
    # An experiment the viewer may not see is answered as one that does not exist: 404, as every route naming one.
    visible_experiment(session, user, experiment_id)
    return prediction(session, checked_selection(session, [experiment_id], [], user), experiment_id)
