"""Plans: an experiment request's probes and 1-process runs, then every grid point predicted and a recommendation
(issue 33's plan; server.services.plans)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, status

from contract.errors import ErrorBody
from server.api.deps import CurrentUser, ProfilesDep, SchedulerDep, SessionDep, SettingsDep
from server.api.errors import NO_STORAGE, OVER_QUOTA, UNREADABLE_BODY, Responses, not_found
from server.models import DEFAULT_EFFICIENCY, ExperimentCreate, ExperimentCreated, Goal, PlanPublic
from server.services import plans

router = APIRouter(prefix="/api/plans", tags=["plans"])

_INVALID: Responses = {
    422: {"description": "a field is invalid or beyond the cluster profile (as POST /api/experiments), or the "
          "experiment is not a training one (base.kind), or a query parameter is out of bounds"}
}  # fmt: skip
_UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {
        "model": ErrorBody,
        "description": "the scheduler cannot be reached; the plan's runs are kept as submit_failed (resubmit its "
        "experiment, `experiment_id`, later)",
    }
}
_NOTHING_TO_RUN: Responses = {
    409: {"description": "the plan is still running, or recommends no point (none predicted, or none qualifies)"}
}
_NO_PLAN = not_found("plan (or the experiment is not a plan)")


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=PlanPublic,
    summary="Plan an experiment: submit its fabric probes and a 1-process run per strategy",
    responses={**UNREADABLE_BODY, **_INVALID, **OVER_QUOTA, **_UNAVAILABLE, **NO_STORAGE},
)
def create_plan(
    request: ExperimentCreate,
    session: SessionDep,
    settings: SettingsDep,
    scheduler: SchedulerDep,
    catalog: ProfilesDep,
    user: CurrentUser,
    goal: Annotated[Goal, Query(description="what the recommendation serves")] = "fastest_epoch",
    efficiency: Annotated[
        float, Query(gt=0, le=1, description="largest_n_at_efficiency: the least predicted efficiency")
    ] = DEFAULT_EFFICIENCY,
    probe_seconds: Annotated[int, Query(ge=1, le=600, description="each fabric probe's time")] = 10,
) -> PlanPublic:
    """The body is an experiment request, checked exactly as POST /api/experiments checks it; nothing of its grid
    runs yet. The plan is an experiment of its own (its id is the plan's): a `probe` run per distinct node count
    and processes per node of the grid's multi-process points, and one 1-process run per strategy."""
    return plans.create_plan(session, request, goal, efficiency, probe_seconds, settings, scheduler, catalog, user)


@router.get(
    "/{plan_id}",
    response_model=PlanPublic,
    summary="A plan: its runs still running, or every grid point predicted, the recommendation and the GPU-hours",
    responses=_NO_PLAN,
)
def get_plan(plan_id: str, session: SessionDep, user: CurrentUser) -> PlanPublic:
    return plans.plan_answer(session, plan_id, user)


@router.post(
    "/{plan_id}/experiment",
    status_code=status.HTTP_201_CREATED,
    response_model=ExperimentCreated,
    summary="Submit the experiment of the points a plan recommends",
    responses={**_NO_PLAN, **_NOTHING_TO_RUN, **_INVALID, **OVER_QUOTA, **_UNAVAILABLE, **NO_STORAGE},
)
def experiment_from_plan(
    plan_id: str,
    session: SessionDep,
    settings: SettingsDep,
    scheduler: SchedulerDep,
    catalog: ProfilesDep,
    user: CurrentUser,
) -> ExperimentCreated:
    """The planned request with each swept field narrowed to the recommended point, submitted as any experiment."""
    return plans.experiment_from_plan(session, plan_id, settings, scheduler, catalog, user)
