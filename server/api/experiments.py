"""Experiments: preview and submit a grid of runs, list them, compare and export their runs, cancel them."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from sqlmodel import Session, col, func, select

from contract.errors import ErrorBody
from contract.spec import RunKind, RunSpec
from contract.states import FINAL_STATES, RunState
from server.api.compare import csv_response
from server.api.deps import MAX_SKIP, CurrentUser, ProfilesDep, SchedulerDep, SessionDep, SettingsDep
from server.api.errors import (
    NO_STORAGE,
    NOT_OWNER,
    OVER_QUOTA,
    UNREADABLE_BODY,
    checked_quotas,
    invalid,
    not_found,
    require_owner,
    service_unavailable,
    storage_error,
)
from server.config import Settings
from server.models import (
    RESUBMITTABLE_STATES,
    ComparePublic,
    Experiment,
    ExperimentChanges,
    ExperimentCreate,
    ExperimentCreated,
    ExperimentPreview,
    ExperimentPublic,
    ExperimentsPublic,
    InferencePublic,
    Run,
    RunEstimate,
    RunPublic,
    RunsPublic,
    SkippedRun,
    User,
)
from server.profiles import ProfileCatalog
from server.scheduler import Scheduler, SchedulerError, SchedulerUnavailable
from server.services.cancellation import cancel_run
from server.services.comparison import compare_rows
from server.services.deletion import delete_runs
from server.services.estimate import EstimateError, estimate_memory, fits
from server.services.inference import CheckpointError, Trained, inference_rows, trained_run
from server.services.planning import Plan, PlanError, plan_experiment
from server.services.submission import create_experiment, preview_script, resubmit_run
from server.services.sweep import MAX_RUNS

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


def experiment_created(
    session: Session, experiment: Experiment, runs: list[Run], skipped: list[SkippedRun] | None = None
) -> ExperimentCreated:
    public = experiment_public(session, experiment)
    return ExperimentCreated(
        **public.model_dump(), runs=[RunPublic.model_validate(run) for run in runs], skipped=skipped or []
    )


def _trained(session: Session, request: ExperimentCreate) -> Trained | None:
    """The training run an inference request chose by id."""
    if request.inference is None or request.inference.checkpoint_run is None:
        return None
    run_id = request.inference.checkpoint_run
    try:
        return trained_run(session.get(Run, run_id), run_id)
    except CheckpointError as exc:
        raise invalid([(("body", "inference", "checkpoint_run"), str(exc))]) from None


def plan_request(
    request: ExperimentCreate, session: Session, catalog: ProfileCatalog, scheduler: Scheduler, user: User
) -> Plan:
    trained = _trained(session, request)
    try:
        plan = plan_experiment(
            request, catalog.profiles, catalog.default, slurm=scheduler.name != "local", trained=trained
        )
    except PlanError as exc:
        raise invalid(exc.problems) from None
    if user.slurm_account and "account" not in plan.sbatch_options:
        # The account an admin mapped the user to; an account the request names (if the profile lets it) wins.
        plan.sbatch_options["account"] = user.slurm_account
    return plan


def _skipped(plan: Plan) -> list[SkippedRun]:
    return [SkippedRun(combination=item.combination, reason=item.reason) for item in plan.skipped]


def unavailable(experiment_id: str, exc: SchedulerUnavailable, runs_left: str) -> HTTPException:
    return service_unavailable(
        f"{exc}. Experiment {experiment_id}: {runs_left} kept as submit_failed; resubmit them "
        f"(POST /api/experiments/{experiment_id}/resubmit) once Slurm answers again.",
        experiment_id=experiment_id,
    )


_INVALID: dict[int | str, dict[str, Any]] = {
    422: {"description": "a field is invalid or beyond the cluster profile, or some grid combinations cannot run"}
}
_UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {
        "model": ErrorBody,
        "description": "the scheduler cannot be reached; the runs are kept as submit_failed, to resubmit later "
        "(`experiment_id` names their experiment)",
    }
}
_NO_EXPERIMENT = not_found("experiment")


def _submit(
    request: ExperimentCreate,
    session: Session,
    settings: Settings,
    scheduler: Scheduler,
    user: User,
    catalog: ProfileCatalog,
) -> ExperimentCreated:
    plan = plan_request(request, session, catalog, scheduler, user)
    checked_quotas(session, user, settings, plan.specs, new=True)
    try:
        experiment, runs, unreachable = create_experiment(session, request, plan, settings, scheduler, user.name)
    except OSError as exc:
        raise storage_error(settings, exc, "nothing was submitted") from None
    if unreachable is not None:
        failed = sum(run.state is RunState.submit_failed for run in runs)
        raise unavailable(experiment.id, unreachable, f"{failed} of its {len(runs)} runs are")
    return experiment_created(session, experiment, runs, _skipped(plan))


def _estimate(index: int, spec: RunSpec, plan: Plan) -> RunEstimate:
    if spec.kind is RunKind.inference:
        return RunEstimate(index=index, estimate=None, warning="no estimate: the estimate is of training's memory")
    try:
        estimate = estimate_memory(spec)
    except EstimateError as exc:
        return RunEstimate(index=index, estimate=None, warning=f"no estimate: {exc}")
    gpu_memory = plan.profile.partitions[plan.partition].gpu_memory_gib
    return RunEstimate(index=index, estimate=estimate, warning=fits(estimate, gpu_memory))


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ExperimentCreated,
    summary="Submit an experiment",
    responses={**UNREADABLE_BODY, **_INVALID, **OVER_QUOTA, **_UNAVAILABLE, **NO_STORAGE},
)
def submit_experiment(
    request: ExperimentCreate,
    session: SessionDep,
    settings: SettingsDep,
    scheduler: SchedulerDep,
    catalog: ProfilesDep,
    user: CurrentUser,
) -> ExperimentCreated:
    """Expand the grid into runs, check them against the cluster profile, write each run's spec and batch script,
    and submit the runs (all of them, or as many as `resources.max_concurrent` lets run at once).

    Runs the scheduler refuses are kept in state `submit_failed` with the scheduler's message. Nothing is created
    if the runs would take the user beyond a quota (429).
    """
    return _submit(request, session, settings, scheduler, user, catalog)


@router.post(
    "/preview",
    response_model=ExperimentPreview,
    summary="Preview an experiment: its runs and one run's batch script, submitting nothing",
    responses={**UNREADABLE_BODY, **_INVALID},
)
def preview_experiment(
    request: ExperimentCreate,
    session: SessionDep,
    settings: SettingsDep,
    scheduler: SchedulerDep,
    catalog: ProfilesDep,
    user: CurrentUser,
    index: Annotated[int, Query(ge=0, lt=MAX_RUNS, description="which run's batch script to render")] = 0,
) -> ExperimentPreview:
    """Validate and expand the request exactly as submitting it would, but write and submit nothing."""
    plan = plan_request(request, session, catalog, scheduler, user)
    if index >= len(plan.specs):
        raise invalid([(("query", "index"), f"the experiment has {len(plan.specs)} runs; index is from 0")])
    return ExperimentPreview(
        name=request.name,
        runs=plan.specs,
        count=len(plan.specs),
        skipped=_skipped(plan),
        estimates=[_estimate(index, spec, plan) for index, spec in enumerate(plan.specs)],
        index=index,
        script=preview_script(plan, index, settings, scheduler),
    )


@router.get("", response_model=ExperimentsPublic, summary="List experiments, newest first")
def list_experiments(
    session: SessionDep,
    owner: Annotated[str | None, Query(max_length=32, description="only this user's experiments")] = None,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ExperimentsPublic:
    query = select(Experiment) if owner is None else select(Experiment).where(Experiment.owner == owner)
    count = session.exec(select(func.count()).select_from(query.subquery())).one()
    experiments = session.exec(query.order_by(col(Experiment.created_at).desc()).offset(skip).limit(limit)).all()
    counts = _state_counts(session, [e.id for e in experiments])
    return ExperimentsPublic(data=[_with_counts(e, counts[e.id]) for e in experiments], count=count)


@router.get("/{experiment_id}", response_model=ExperimentPublic, summary="One experiment", responses=_NO_EXPERIMENT)
def get_experiment(experiment_id: str, session: SessionDep) -> ExperimentPublic:
    return experiment_public(session, _get(session, experiment_id))


@router.get(
    "/{experiment_id}/compare",
    response_model=ComparePublic,
    summary="One row per run: epoch time, speed-up, efficiency, final loss and accuracy, peak memory",
    responses=_NO_EXPERIMENT,
)
def compare_experiment(experiment_id: str, session: SessionDep) -> ComparePublic:
    _get(session, experiment_id)
    rows = compare_rows(session, experiment_ids=[experiment_id])
    return ComparePublic(experiment_id=experiment_id, data=rows, count=len(rows))


@router.get(
    "/{experiment_id}/inference",
    response_model=InferencePublic,
    summary="One row per inference run: tokens/s, time to first token, per-token latency, memory per rank",
    responses=_NO_EXPERIMENT,
)
def inference_experiment(experiment_id: str, session: SessionDep) -> InferencePublic:
    _get(session, experiment_id)
    runs = session.exec(select(Run).where(Run.experiment_id == experiment_id).order_by(col(Run.position))).all()
    rows = inference_rows(session, runs)
    return InferencePublic(experiment_id=experiment_id, data=rows, count=len(rows))


@router.get(
    "/{experiment_id}/compare.csv",
    response_class=Response,
    summary="The comparison rows as CSV, one line per run, with a header of the field names",
    responses={200: {"content": {"text/csv": {}}, "description": "the rows of /compare as CSV"}, **_NO_EXPERIMENT},
)
def compare_experiment_csv(experiment_id: str, session: SessionDep) -> Response:
    experiment = _get(session, experiment_id)
    return csv_response(compare_rows(session, experiment_ids=[experiment.id]), f"scalelab-{experiment.id}.csv")


@router.post(
    "/{experiment_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RunsPublic,
    summary="Cancel every run of the experiment that has not ended",
    responses={
        **NOT_OWNER,
        **_NO_EXPERIMENT,
        409: {"description": "every run has already ended"},
        502: {"description": "the scheduler could not cancel some jobs (each is named); the others were cancelled"},
        503: {"description": "the scheduler cannot be reached; the runs not yet asked to stop are left as they are"},
    },
)
def cancel_experiment(
    experiment_id: str, session: SessionDep, scheduler: SchedulerDep, user: CurrentUser
) -> RunsPublic:
    """Jobs are cancelled through the scheduler and show as `cancelled` once the monitor sees them end;
    runs never submitted are cancelled at once. Returns the runs asked to stop. Only the owner or an admin may."""
    experiment = _get(session, experiment_id)
    require_owner(user, experiment.owner, f"experiment {experiment_id}")
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
        except SchedulerUnavailable as exc:
            session.commit()
            raise service_unavailable(f"cannot cancel now: {exc}") from None
        except SchedulerError as exc:
            failures.append(f"run {run.id}: {exc}")
    session.commit()
    if failures:
        raise HTTPException(
            status.HTTP_502_BAD_GATEWAY,
            f"could not cancel {len(failures)} of {len(runs)} runs (the others were): " + "; ".join(failures),
        )
    return RunsPublic(data=[RunPublic.model_validate(run) for run in runs], count=len(runs))


@router.post(
    "/{experiment_id}/resubmit",
    response_model=RunsPublic,
    summary="Submit again every run of the experiment that ended without completing",
    responses={
        **NOT_OWNER,
        **_NO_EXPERIMENT,
        409: {"description": "no run of the experiment can be resubmitted"},
        **OVER_QUOTA,
        **_UNAVAILABLE,
    },
)
def resubmit_experiment(
    experiment_id: str, session: SessionDep, settings: SettingsDep, scheduler: SchedulerDep, user: CurrentUser
) -> RunsPublic:
    """Failed, timed-out, cancelled, preempted and never-submitted runs run again with the same spec and script,
    resuming from their last checkpoint where they have one. Returns the runs submitted again. Only the owner or
    an admin may, within the owner's quotas."""
    experiment = _get(session, experiment_id)
    require_owner(user, experiment.owner, f"experiment {experiment_id}")
    runs = session.exec(
        select(Run)
        .where(Run.experiment_id == experiment_id, col(Run.state).in_(RESUBMITTABLE_STATES))
        .order_by(col(Run.position))
    ).all()
    if not runs:
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"no run of experiment {experiment_id} ended without completing; nothing to do"
        )
    checked_quotas(session, owner_of(session, experiment.owner, user), settings, _specs(runs), new=False)
    for index, run in enumerate(runs):
        try:
            resubmit_run(session, run, experiment, scheduler)
        except SchedulerUnavailable as exc:
            raise unavailable(experiment_id, exc, f"{len(runs) - index} runs are still") from None
    return RunsPublic(data=[RunPublic.model_validate(run) for run in runs], count=len(runs))


@router.post(
    "/{experiment_id}/clone",
    status_code=status.HTTP_201_CREATED,
    response_model=ExperimentCreated,
    summary="Submit a new experiment made from this one's request with some changes",
    responses={**UNREADABLE_BODY, **_NO_EXPERIMENT, **_INVALID, **OVER_QUOTA, **_UNAVAILABLE, **NO_STORAGE},
)
def clone_experiment(
    experiment_id: str,
    changes: ExperimentChanges,
    session: SessionDep,
    settings: SettingsDep,
    scheduler: SchedulerDep,
    catalog: ProfilesDep,
    user: CurrentUser,
) -> ExperimentCreated:
    """The new request is the original one with `changes` laid over it; it is validated like a new submission,
    so errors name the fields of the combined request. Anyone may clone; the clone is theirs."""
    original = _get(session, experiment_id)
    try:
        request = ExperimentCreate.model_validate(changes.apply(original.request))
    except ValidationError as exc:
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)]
        ) from None
    return _submit(request, session, settings, scheduler, user, catalog)


def _specs(runs: Sequence[Run]) -> list[RunSpec]:
    return [RunSpec.model_validate(run.spec) for run in runs]


def owner_of(session: Session, owner: str | None, acting: User) -> User:
    """Whose quotas runs count against: their owner's (an admin acting on them does not spend their own)."""
    found = session.get(User, owner) if owner else None
    return found or acting


@router.delete(
    "/{experiment_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete an experiment whose runs have all ended: its runs, their metrics and their directories",
    responses={**NOT_OWNER, **_NO_EXPERIMENT, 409: {"description": "some runs have not ended: cancel them first"}},
)
def delete_experiment(experiment_id: str, session: SessionDep, user: CurrentUser) -> Response:
    """Only the owner or an admin may. Nothing is deleted while any run is live."""
    experiment = _get(session, experiment_id)
    require_owner(user, experiment.owner, f"experiment {experiment_id}")
    runs = session.exec(select(Run).where(Run.experiment_id == experiment_id)).all()
    live = [run.id for run in runs if not run.state.is_final]
    if live:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"{len(live)} runs of experiment {experiment_id} have not ended ({', '.join(live[:5])}): cancel them first",
        )
    delete_runs(session, runs, experiment)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
