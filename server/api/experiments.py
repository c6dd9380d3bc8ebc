"""Experiments: preview and submit a grid of runs, list them, compare and export their runs, cancel them, rerun
their failed runs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status

from contract.errors import ErrorBody
from server.api.deps import MAX_SKIP, CurrentUser, ProfilesDep, SchedulerDep, SessionDep, SettingsDep
from server.api.downloads import csv_download
from server.api.errors import NO_STORAGE, NOT_OWNER, OVER_QUOTA, UNREADABLE_BODY, not_found
from server.api.prepared import serialized_here
from server.models import (
    MAX_RUNS_PER_EXPERIMENT,
    ComparePublic,
    ExperimentChanges,
    ExperimentCreate,
    ExperimentCreated,
    ExperimentFabricPublic,
    ExperimentPreview,
    ExperimentPublic,
    ExperimentsPublic,
    FailedRerun,
    FailureSummary,
    InferencePublic,
    RerunPreview,
    RunPublic,
    RunsPublic,
    ScalingPublic,
    SharingChange,
)
from server.services import deletion, experiments, fabric, submission
from server.services.cards.carry import refuse_change
from server.services.comparison import compare_csv, compare_rows, scaling
from server.services.failure_summary import failure_summary
from server.services.inference import inference_rows
from server.services.runs import runs_of_experiment
from server.services.visibility import share, visible_experiment

router = APIRouter(prefix="/api/experiments", tags=["experiments"])


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
    return experiments.experiment_created(
        session, *submission.submit_experiment(session, request, settings, scheduler, catalog, user)
    )


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
    index: Annotated[
        int, Query(ge=0, lt=MAX_RUNS_PER_EXPERIMENT, description="which run's batch script to render")
    ] = 0,
) -> ExperimentPreview:
    """Validate and expand the request exactly as submitting it would, but write and submit nothing."""
    return experiments.preview(session, request, index, settings, scheduler, catalog, user)


@router.get("", response_model=ExperimentsPublic, summary="List experiments, newest first")
def list_experiments(
    session: SessionDep,
    user: CurrentUser,
    owner: Annotated[str | None, Query(max_length=32, description="only this user's experiments")] = None,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """The experiments you may see: your own, those shared with everyone or with a Unix group you are in (an
    admin sees all)."""
    return serialized_here(experiments.list_experiments(session, user, owner, skip, limit))


@router.get("/{experiment_id}", response_model=ExperimentPublic, summary="One experiment", responses=_NO_EXPERIMENT)
def get_experiment(experiment_id: str, session: SessionDep, user: CurrentUser) -> Response:
    """One you may see; another's that is not shared with you answers 404, as one that does not exist."""
    experiment = visible_experiment(session, user, experiment_id)
    return serialized_here(experiments.experiment_public(session, experiment, user))


@router.get(
    "/{experiment_id}/compare",
    response_model=ComparePublic,
    summary="One row per run: epoch time, speed-up, efficiency, final loss and accuracy, peak memory",
    responses=_NO_EXPERIMENT,
)
def compare_experiment(experiment_id: str, session: SessionDep, user: CurrentUser) -> Response:
    visible_experiment(session, user, experiment_id)
    rows = compare_rows(session, experiment_ids=[experiment_id])
    return serialized_here(ComparePublic(experiment_id=experiment_id, data=rows, count=len(rows)))


@router.get(
    "/{experiment_id}/scaling",
    response_model=ScalingPublic,
    summary="Per series: points with 95 % intervals, Amdahl's and the USL's fits, predicted speed-ups, what they mean",
    responses=_NO_EXPERIMENT,
)
def scaling_of_experiment(experiment_id: str, session: SessionDep, user: CurrentUser) -> Response:
    visible_experiment(session, user, experiment_id)
    return serialized_here(scaling(compare_rows(session, experiment_ids=[experiment_id]), experiment_id))


@router.get(
    "/{experiment_id}/failures",
    response_model=FailureSummary,
    summary="Its failed runs by failure kind and by grid coordinate, each kind with what to do",
    responses=_NO_EXPERIMENT,
)
def failures_of_experiment(experiment_id: str, session: SessionDep, user: CurrentUser) -> FailureSummary:
    """ "2 of 24 out of memory: fsdp, 8 GPUs": the kinds of its failed runs (each run's own evidence is its
    `failure_detail`), where in the grid they failed, and each kind's sentence of what to do."""
    return failure_summary(session, visible_experiment(session, user, experiment_id))


@router.get(
    "/{experiment_id}/inference",
    response_model=InferencePublic,
    summary="One row per inference run: tokens/s, time to first token, per-token latency, memory per rank",
    responses=_NO_EXPERIMENT,
)
def inference_experiment(experiment_id: str, session: SessionDep, user: CurrentUser) -> InferencePublic:
    visible_experiment(session, user, experiment_id)
    rows = inference_rows(session, runs_of_experiment(session, experiment_id))
    return InferencePublic(experiment_id=experiment_id, data=rows, count=len(rows))


@router.get(
    "/{experiment_id}/fabric",
    response_model=ExperimentFabricPublic,
    summary="One entry per fabric probe run: its shape and state, and each tier it measured with its curve and fit",
    responses=_NO_EXPERIMENT,
)
def fabric_of_experiment(experiment_id: str, session: SessionDep, user: CurrentUser) -> ExperimentFabricPublic:
    """The probe runs of the experiment in grid order (its other runs are left out): each one's shape (nodes,
    processes per node, profile, partition; the backend once it has measured), its state and, where it failed,
    why; and, once its output has been read, each tier it measured as `GET /api/fabric` lists it (the points with
    their bus bandwidths, the fitted alpha and beta, and how well they fit)."""
    visible_experiment(session, user, experiment_id)
    data = fabric.probe_runs(session, runs_of_experiment(session, experiment_id))
    return ExperimentFabricPublic(experiment_id=experiment_id, data=data, count=len(data))


@router.get(
    "/{experiment_id}/compare.csv",
    response_class=Response,
    summary="The comparison rows as CSV, one line per run, with a header of the field names",
    responses={200: {"content": {"text/csv": {}}, "description": "the rows of /compare as CSV"}, **_NO_EXPERIMENT},
)
def compare_experiment_csv(experiment_id: str, session: SessionDep, user: CurrentUser) -> Response:
    experiment = visible_experiment(session, user, experiment_id)
    return csv_download(
        compare_csv(compare_rows(session, experiment_ids=[experiment.id])), f"scalelab-{experiment.id}.csv"
    )


@router.put(
    "/{experiment_id}/sharing",
    response_model=ExperimentPublic,
    summary="Share the experiment, read-only, with a Unix group or everyone signed in, or make it private again",
    responses={
        **UNREADABLE_BODY,
        **NOT_OWNER,
        **_NO_EXPERIMENT,
        422: {
            "description": "`group` is missing, names no Unix group, or one you are not in; or is given without "
            "`with: group`"
        },
    },
)
def share_experiment(
    experiment_id: str, change: SharingChange, session: SessionDep, user: CurrentUser
) -> ExperimentPublic:
    """An experiment is seen by its owner and the admins; shared, also by the members of a Unix group (`{"with":
    "group", "group": "NAME"}`) or by everyone signed in (`{"with": "everyone"}`), who see it and its runs' output,
    metrics and reports but cannot change anything. `{"with": "private"}` takes that back. Only the owner or an admin
    may; the owner shares only with a group they are a member of."""
    return experiments.experiment_public(session, share(session, user, experiment_id, change), user)


@router.post(
    "/{experiment_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RunsPublic,
    summary="Cancel every run of the experiment that has not ended",
    responses={
        **NOT_OWNER,
        **_NO_EXPERIMENT,
        409: {"description": "every run has already ended, or it was imported from a scaling card (read-only)"},
        502: {"description": "the scheduler could not cancel some jobs (each is named); the others were cancelled"},
        503: {"description": "the scheduler cannot be reached; the runs not yet asked to stop are left as they are"},
    },
)
def cancel_experiment(
    experiment_id: str, session: SessionDep, scheduler: SchedulerDep, user: CurrentUser
) -> RunsPublic:
    """Jobs are cancelled through the scheduler and show as `cancelled` once the monitor sees them end;
    runs never submitted are cancelled at once. Returns the runs asked to stop. Only the owner or an admin may."""
    visible_experiment(session, user, experiment_id)
    refuse_change(session, experiment_id, "cancelled")
    runs = submission.cancel_experiment(session, experiment_id, scheduler, user)
    return RunsPublic(data=[RunPublic.model_validate(run) for run in runs], count=len(runs))


@router.post(
    "/{experiment_id}/resubmit",
    response_model=RunsPublic,
    summary="Submit again every run of the experiment that ended without completing",
    responses={
        **NOT_OWNER,
        **_NO_EXPERIMENT,
        409: {"description": "no run of the experiment can be resubmitted, or it was imported from a scaling card"},
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
    visible_experiment(session, user, experiment_id)
    refuse_change(session, experiment_id, "resubmitted")
    runs = submission.resubmit_experiment(session, experiment_id, settings, scheduler, user)
    return RunsPublic(data=[RunPublic.model_validate(run) for run in runs], count=len(runs))


@router.post(
    "/{experiment_id}/rerun",
    status_code=status.HTTP_201_CREATED,
    response_model=RunsPublic,
    summary="Rerun the failed: new runs of the experiment repeating its failed runs, of some failure kinds, with "
    "changes",
    responses={
        **UNREADABLE_BODY,
        **NOT_OWNER,
        **_NO_EXPERIMENT,
        409: {
            "description": "no run matches (the detail says which failed runs there are), nothing was written, or it "
            "was imported from a scaling card (read-only)"
        },
        422: {
            "description": "a change makes a rerun invalid or beyond the profile (the error names the field of `set` "
            "and the run), a named run is not the experiment's, or the request no longer fits its profile"
        },
        **OVER_QUOTA,
        **_UNAVAILABLE,
        **NO_STORAGE,
    },
)
def rerun_failed(
    experiment_id: str,
    session: SessionDep,
    settings: SettingsDep,
    scheduler: SchedulerDep,
    catalog: ProfilesDep,
    user: CurrentUser,
    asked: FailedRerun | None = None,
) -> RunsPublic:
    """Each failed run chosen (`failed`: failed, out_of_memory, timeout or node_fail; `kinds`: only those failure
    kinds; `run_ids`: only those runs) gets a new run in the same experiment, its spec with `set` laid over it,
    whose `rerun_of` names the original; the original stays as it ended, and keeps its row in the comparison.
    The new runs are planned, rendered and submitted as the experiment's runs (its profile, resources, isolation
    and concurrency limit), on the image digest the original ran in where it recorded one the profile can pin.
    All are created or none. Only the owner or an admin may, within the owner's quotas. No body: every failed run,
    unchanged. Returns the new runs."""
    visible_experiment(session, user, experiment_id)
    refuse_change(session, experiment_id, "rerun")
    runs = submission.rerun_failed(session, experiment_id, asked or FailedRerun(), settings, scheduler, catalog, user)
    return RunsPublic(data=[RunPublic.model_validate(run) for run in runs], count=len(runs))


@router.post(
    "/{experiment_id}/rerun/preview",
    response_model=RerunPreview,
    summary="Preview rerunning the failed: which failed runs would run again, and each rerun's spec; nothing is "
    "submitted",
    responses={
        **UNREADABLE_BODY,
        **NOT_OWNER,
        **_NO_EXPERIMENT,
        409: {
            "description": "no run matches (the detail says which failed runs there are), or it was imported from a "
            "scaling card (read-only)"
        },
        422: {"description": "as for the rerun itself: the error names the field of `set` and the run"},
    },
)
def preview_rerun_failed(
    experiment_id: str,
    session: SessionDep,
    settings: SettingsDep,
    scheduler: SchedulerDep,
    catalog: ProfilesDep,
    user: CurrentUser,
    asked: FailedRerun | None = None,
) -> RerunPreview:
    """Chooses and checks the runs exactly as POST /api/experiments/{id}/rerun would, and answers each failed run
    with its rerun's spec and the fields that change, writing and submitting nothing."""
    visible_experiment(session, user, experiment_id)
    refuse_change(session, experiment_id, "rerun")
    asked = asked or FailedRerun()
    return submission.preview_reruns(
        submission.plan_reruns(session, experiment_id, asked, settings, scheduler, catalog, user)
    )


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
    so errors name the fields of the combined request. Anyone who may see it may clone it; the clone is theirs
    (and private)."""
    visible_experiment(session, user, experiment_id)
    return experiments.experiment_created(
        session, *submission.clone_experiment(session, experiment_id, changes, settings, scheduler, catalog, user)
    )


@router.delete(
    "/{experiment_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete an experiment whose runs have all ended: its runs, their metrics and their directories",
    description="Only the owner or an admin may. Nothing is deleted while any run is live. Where jobs run as "
    "their users, the runs' directories are their user's: they stay, and only they may delete them.",
    responses={**NOT_OWNER, **_NO_EXPERIMENT, 409: {"description": "some runs have not ended: cancel them first"}},
)
def delete_experiment(experiment_id: str, session: SessionDep, user: CurrentUser) -> Response:
    """Only the owner or an admin may. Nothing is deleted while any run is live."""
    visible_experiment(session, user, experiment_id)
    deletion.delete_experiment(session, experiment_id, user)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
