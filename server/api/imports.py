"""Imports: logs of runs made outside scalelab, read into an experiment."""

from __future__ import annotations

from fastapi import APIRouter, status

from server.api.deps import CurrentUser, SessionDep, SettingsDep
from server.api.errors import NO_STORAGE, UNREADABLE_BODY
from server.models import ExperimentCreated, ImportCreate
from server.services import experiments
from server.services.imports import import_logs

router = APIRouter(prefix="/api/imports", tags=["imports"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ExperimentCreated,
    summary="Import logs of runs made outside scalelab as a new experiment, one finished run per file",
    responses={
        **UNREADABLE_BODY,
        422: {"description": "a field is invalid, or some files cannot be read (each is named); none is kept"},
        429: {"description": "the runs would take the user beyond max_runs_per_day; none is kept"},
        **NO_STORAGE,
    },
)
def import_experiment(
    request: ImportCreate, session: SessionDep, settings: SettingsDep, user: CurrentUser
) -> ExperimentCreated:
    """Every file is read before anything is written: its `[METRIC]` records (JSON, or the `key=value` lines that
    course scripts print) become the run's metrics, and the set-up they mention (`gpus`, `world_size`, `nodes`,
    `strategy`, ... or the start record) its spec; unmentioned spec fields take their defaults. A run is
    `completed` unless its last end record says otherwise. A file without metric records, or with a metric line
    that cannot be read (a broken record, a figure that is not a finite number, an integer beyond 64 bits, nesting or
    lengths beyond a record's bounds, more records than a run may hold), is named in a 422 and nothing is imported.
    Imported runs count toward the user's runs a day (max_runs_per_day)."""
    return experiments.experiment_created(session, *import_logs(session, request, settings, user))
