"""Pinned references and the regression test: pin an experiment as its spec's reference (or mark it an A/A run),
compare a later experiment with it point by point, read a reference's history and each profile's noise floor."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from server.api.deps import CurrentUser, SessionDep
from server.api.errors import NOT_OWNER, not_found
from server.models import NoiseFloorsPublic, ReferenceHistory, ReferencePublic, RegressionPublic
from server.services import references

router = APIRouter(prefix="/api", tags=["references"])

_NO_EXPERIMENT = not_found("experiment")


@router.put(
    "/experiments/{experiment_id}/reference",
    response_model=ReferencePublic,
    summary="Pin the experiment as the reference of its spec (the one pinned before for that spec is unpinned)",
    responses={**NOT_OWNER, **_NO_EXPERIMENT},
)
def pin_reference(experiment_id: str, session: SessionDep, user: CurrentUser) -> ReferencePublic:
    """Its spec: its runs' specs (without the seed, the target and the learning-rate rule's reference), the
    request's scaling, isolation, partition and sbatch options, and the profile its runs ran on; not its name,
    repeats or time limit. Later experiments of that spec are compared with it (GET .../regression). Only its owner
    or an admin may."""
    return references.pin(session, user, experiment_id)


@router.put(
    "/experiments/{experiment_id}/aa",
    response_model=ReferencePublic,
    summary="Mark the experiment as an A/A run: its spec run again, to measure the profile's noise floor",
    responses={
        **NOT_OWNER,
        **_NO_EXPERIMENT,
        409: {"description": "no reference is pinned for its spec, or it is that reference"},
    },
)
def mark_aa(experiment_id: str, session: SessionDep, user: CurrentUser) -> ReferencePublic:
    """Its ratios to the reference of its spec (one per point) join its profile's A/A ratios, whose 95th percentile
    departure from 1 is the floor every regression verdict on that profile is drawn against."""
    return references.mark_aa(session, user, experiment_id)


@router.delete(
    "/experiments/{experiment_id}/reference",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    summary="Unpin the experiment (as a reference, or as an A/A run)",
    responses={**NOT_OWNER, 404: {"description": "no such experiment, or it is neither pinned nor marked A/A"}},
)
def unpin_reference(experiment_id: str, session: SessionDep, user: CurrentUser) -> Response:
    references.unpin(session, user, experiment_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/experiments/{experiment_id}/regression",
    response_model=RegressionPublic,
    summary="The experiment against its spec's pinned reference (or another experiment): per point the ratio of "
    "times with its 95 % bootstrap interval and a verdict against the profile's noise floor",
    responses={
        404: {"description": "no such experiment, or no reference is pinned for its spec"},
        422: {"description": "`against` names no experiment the viewer may see"},
    },
)
def regression_of(
    experiment_id: str,
    session: SessionDep,
    user: CurrentUser,
    against: Annotated[
        str | None,
        Query(max_length=16, description="compare with this experiment instead of the pinned reference (an overlay)"),
    ] = None,
) -> RegressionPublic:
    """A point is a series at a GPU count; its time is the series' measure (epoch, step or run time) of each
    completed run. The ratio is later over reference (above 1: slower); its interval comes from 2000 bootstrap
    resamples, seeded, so that it is the same at every read. regressed: the interval lies above 1 + floor; improved:
    below 1 / (1 + floor). A reference point carrying warnings hedges the verdict and says why."""
    return references.regression_of(session, user, experiment_id, against)


@router.get(
    "/references/{experiment_id}/history",
    response_model=ReferenceHistory,
    summary="A pinned reference's history: every experiment of its spec, oldest first, each against the reference, "
    "with its image and versions",
    responses={404: {"description": "no such experiment, or it is not a pinned reference"}},
)
def reference_history(experiment_id: str, session: SessionDep, user: CurrentUser) -> ReferenceHistory:
    """Drift after a driver, NCCL or image change shows as a step in the ratios; each entry names its image digest
    and versions where its runs reported them."""
    return references.history(session, user, experiment_id)


@router.get(
    "/noise-floors",
    response_model=NoiseFloorsPublic,
    summary="The noise floor of each profile with a pinned reference: learned from its A/A pairs, or the default",
)
def noise_floors(session: SessionDep, user: CurrentUser) -> NoiseFloorsPublic:
    return NoiseFloorsPublic(data=references.noise_floors(session))
