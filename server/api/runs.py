"""Runs: their state, spec, metric records and output; cancelling them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from contract.spec import Model, Strategy
from contract.states import RunState
from server.api.deps import MAX_OFFSET, MAX_SKIP, CurrentUser, ProfilesDep, SchedulerDep, SessionDep, SettingsDep
from server.api.errors import NO_STORAGE, NOT_OWNER, OVER_QUOTA, not_found
from server.api.prepared import PreparedJSON, kept_answer
from server.models import (
    GenerationsPublic,
    MetricsPublic,
    ProbeRunFabric,
    RunCode,
    RunEventsPublic,
    RunLog,
    RunPublic,
    RunsPublic,
    RunStacks,
)
from server.services import code, deletion, fabric, hangs, inference, runs, submission
from server.services.cards.carry import refuse_change
from server.services.visibility import visible_run

router = APIRouter(prefix="/api/runs", tags=["runs"])
_NO_RUN = not_found("run")


@router.get(
    "", response_model=RunsPublic, summary="List runs, newest first, by experiment, state, model, strategy and owner"
)
def list_runs(
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    experiment_id: str | None = None,
    state: Annotated[list[RunState] | None, Query(description="one or more states")] = None,
    model: Model | None = None,
    strategy: Strategy | None = None,
    owner: Annotated[str | None, Query(max_length=32, description="only this user's runs")] = None,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """The runs of experiments you may see."""
    query = runs.runs_query(experiment_id, state or (), model, strategy, owner, viewer=user)
    return kept_answer(runs.list_runs_answer(session, query, skip, limit, user), request)


@router.get("/{run_id}", response_model=RunPublic, summary="One run: state, Slurm job id, spec", responses=_NO_RUN)
def get_run(run_id: str, session: SessionDep, user: CurrentUser) -> Response:
    """A run is seen by whoever may see its experiment; to others it answers 404, as one that does not exist."""
    return PreparedJSON(runs.run_json(session, run_id, user))


@router.get(
    "/{run_id}/metrics",
    response_model=MetricsPublic,
    summary="The run's metric records that count, as the worker printed them, in order; all of them on request",
    responses=_NO_RUN,
)
def get_run_metrics(
    request: Request,
    run_id: str,
    session: SessionDep,
    user: CurrentUser,
    kind: Annotated[str | None, Query(pattern=r"^[a-z_]{1,32}$", description="only records of this kind")] = None,
    history: Annotated[
        bool,
        Query(
            description="every record the run printed, each with `superseded`: true where it no longer counts (an "
            "epoch a resume from an earlier checkpoint went back before, or a figure printed again); by default "
            "only the records that count"
        ),
    ] = False,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
) -> Response:
    """After a restart, the epochs the worker ran again replace those it printed before: the records that count
    are what the run's figures, page and comparisons are made of."""
    return kept_answer(runs.metrics_json(session, run_id, user, kind, skip, limit, history), request)


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
    user: CurrentUser,
    offset: Annotated[
        int, Query(ge=0, le=MAX_OFFSET, description="byte offset to read from: 0, then the last next_offset")
    ] = 0,
    limit: Annotated[int, Query(ge=1024, le=1024 * 1024, description="the most bytes to return")] = 256 * 1024,
) -> RunLog:
    """To follow a run, ask again from `next_offset` until `complete` is true."""
    visible_run(session, user, run_id)
    return runs.read_log(session, run_id, offset, limit)


@router.get(
    "/{run_id}/generations",
    response_model=GenerationsPublic,
    summary="An inference run's generations: each prompt and the text generated after it",
    responses={404: {"description": "no such run, it is not an inference run, or its file is not its own"}},
)
def get_run_generations(run_id: str, session: SessionDep, user: CurrentUser) -> GenerationsPublic:
    """Empty, with `complete` false, until the run has written its generations."""
    visible_run(session, user, run_id)
    return inference.generations(session, run_id)


@router.get(
    "/{run_id}/fabric",
    response_model=ProbeRunFabric,
    summary="A fabric probe run's shape and state, and each tier it measured with its curve and fit",
    responses={404: {"description": "no such run, or it is not a fabric probe run"}},
)
def get_run_fabric(run_id: str, session: SessionDep, user: CurrentUser) -> ProbeRunFabric:
    """Its row of `GET /api/experiments/{id}/fabric`, alone: the tiers appear once its output has been read."""
    return fabric.probe_run(session, visible_run(session, user, run_id))


@router.post(
    "/{run_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RunPublic,
    summary="Cancel a run that has not ended",
    responses={
        **NOT_OWNER,
        **_NO_RUN,
        409: {"description": "the run has already ended, or its experiment came from a scaling card (read-only)"},
        502: {"description": "the scheduler could not cancel the job"},
        503: {"description": "the scheduler cannot be reached; the run is left as it is"},
    },
)
def cancel_one_run(run_id: str, session: SessionDep, scheduler: SchedulerDep, user: CurrentUser) -> RunPublic:
    """A submitted run's job is cancelled through the scheduler, and the run shows as `cancelled` once the
    monitor sees the job end; a run never submitted is cancelled at once. Only the owner or an admin may."""
    run = visible_run(session, user, run_id)
    refuse_change(session, run.experiment_id, "cancelled")
    return RunPublic.model_validate(submission.cancel(session, run_id, scheduler, user))


@router.post(
    "/{run_id}/resubmit",
    response_model=RunPublic,
    summary="Submit again a run that ended without completing",
    responses={
        **NOT_OWNER,
        **_NO_RUN,
        **OVER_QUOTA,
        409: {
            "description": "the run is live, it completed (clone its experiment instead), or its experiment came "
            "from a scaling card (read-only)"
        },
        503: {"description": "the scheduler cannot be reached; the run is kept as submit_failed"},
    },
)
def resubmit_one_run(
    run_id: str, session: SessionDep, settings: SettingsDep, scheduler: SchedulerDep, user: CurrentUser
) -> RunPublic:
    """Same spec, same batch script, same directory: the worker resumes from the run's last checkpoint if it has
    one. The run's earlier jobs stay in its events. Within a concurrency limit, it waits for a free slot.
    Only the owner or an admin may, within the owner's quotas."""
    run = visible_run(session, user, run_id)
    refuse_change(session, run.experiment_id, "resubmitted")
    return RunPublic.model_validate(submission.resubmit(session, run_id, settings, scheduler, user))


@router.post(
    "/{run_id}/rerun",
    status_code=status.HTTP_201_CREATED,
    response_model=RunPublic,
    summary="Run again: a new run of the same spec, pinned to the image digest this run ran on",
    responses={
        **NOT_OWNER,
        **_NO_RUN,
        409: {
            "description": "the run recorded no image digest, its profile's runtime cannot pin one, or its "
            "experiment came from a scaling card (read-only)"
        },
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
    run = visible_run(session, user, run_id)
    refuse_change(session, run.experiment_id, "rerun")
    return RunPublic.model_validate(submission.run_again(session, run_id, settings, scheduler, catalog, user))


@router.get(
    "/{run_id}/code",
    response_model=RunCode,
    summary="Which code a program's run started (its script's and files' sha256, git's revision), and whether its "
    "script is the same now",
    responses=_NO_RUN,
)
def get_run_code(run_id: str, session: SessionDep, catalog: ProfilesDep, user: CurrentUser) -> RunCode:
    """As the run's batch script noted it before the launch; "now" compares the script's sha256 with the file as it
    is, where the server can read it (under the profile's program roots), else says why it cannot tell: a "run
    again" starts whatever the workdir holds then."""
    run = visible_run(session, user, run_id)
    record = code.code_records(session, [run.id]).get(run.id)
    return code.run_code(run, record, catalog.profiles.get(run.profile or ""))


@router.get(
    "/{run_id}/stacks",
    response_model=RunStacks,
    summary="A stalled run's hang verdict and every rank's last stack dump (the hang watchdog's)",
    responses=_NO_RUN,
)
def get_run_stacks(run_id: str, session: SessionDep, user: CurrentUser) -> RunStacks:
    """Read from the run's directory at each call (bounded, regular files only): a rank with no dump has null."""
    return hangs.stacks_public(visible_run(session, user, run_id))


@router.get(
    "/{run_id}/events",
    response_model=RunEventsPublic,
    summary="The run's course: submissions, state changes with Slurm's reasons, requeues, cancellations",
    responses=_NO_RUN,
)
def get_run_events(run_id: str, session: SessionDep, user: CurrentUser) -> RunEventsPublic:
    visible_run(session, user, run_id)
    return runs.events(session, run_id)


@router.delete(
    "/{run_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a run that has ended: its metrics, events and directory",
    description="Only the owner or an admin may. Its experiment stays, with its other runs. Where jobs run as "
    "their users, the run's directory is its user's: it stays, and only they may delete it.",
    responses={
        **NOT_OWNER,
        **_NO_RUN,
        409: {"description": "the run has not ended (cancel it first), or its experiment came from a scaling card"},
    },
)
def delete_run(run_id: str, session: SessionDep, user: CurrentUser) -> Response:
    """Only the owner or an admin may. Its experiment stays, with its other runs."""
    run = visible_run(session, user, run_id)
    refuse_change(session, run.experiment_id, "changed: delete the whole experiment instead")
    deletion.delete_run(session, run_id, user)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
