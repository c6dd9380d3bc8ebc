"""Comparisons of any selection of runs: whole experiments, single runs, or both together."""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated

from fastapi import APIRouter, Query, Response
from sqlmodel import Session, col, select

from server.api.deps import SessionDep
from server.api.errors import invalid
from server.models import ComparePublic, CompareRow, Experiment, Run
from server.services.comparison import compare_csv, compare_rows, epoch_histories

router = APIRouter(prefix="/api/compare", tags=["compare"])

# A dashboard of more runs than this is unreadable, and the answer would grow without bound.
MAX_RUNS = 500
MAX_EXPERIMENTS = 50

RunIds = Annotated[
    list[str],
    Query(alias="run_id", max_length=MAX_RUNS, description="runs to compare (repeat the parameter)"),
]
ExperimentIds = Annotated[
    list[str],
    Query(
        alias="experiment_id",
        max_length=MAX_EXPERIMENTS,
        description="experiments whose runs are all compared (repeat the parameter)",
    ),
]


def selected_rows(session: Session, experiment_ids: Collection[str], run_ids: Collection[str]) -> list[CompareRow]:
    """The comparison rows of a selection that names only existing runs and experiments, at most MAX_RUNS of them."""
    if not experiment_ids and not run_ids:
        raise invalid([(("query", "run_id"), "name at least one run_id or experiment_id")])
    _require_all(session, Run, run_ids, "run_id")
    _require_all(session, Experiment, experiment_ids, "experiment_id")
    rows = compare_rows(session, experiment_ids=experiment_ids, run_ids=run_ids)
    if len(rows) > MAX_RUNS:
        too_many = f"the selection holds {len(rows)} runs; compare at most {MAX_RUNS}"
        raise invalid([(("query", "experiment_id"), too_many)])
    return rows


def _require_all(session: Session, table: type[Run] | type[Experiment], ids: Collection[str], field: str) -> None:
    """A selection naming what does not exist is refused, naming the parameter and the first few unknown ids."""
    found = set(session.exec(select(table.id).where(col(table.id).in_(ids))).all())
    missing = sorted(set(ids) - found)
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        what = field.removesuffix("_id")
        raise invalid([(("query", field), f"no {what} {', '.join(map(repr, missing[:3]))}{more}")])


@router.get(
    "",
    response_model=ComparePublic,
    summary="Runs side by side: epoch time, speed-up and efficiency within the selection, loss, accuracy, memory",
    responses={422: {"description": "no run or experiment named, too many runs, or some named do not exist"}},
)
def compare(
    session: SessionDep,
    run_ids: RunIds = [],  # noqa: B006 (FastAPI copies query defaults)
    experiment_ids: ExperimentIds = [],  # noqa: B006
    history: Annotated[bool, Query(description="also each run's epochs: losses, accuracy, epoch time")] = False,
) -> ComparePublic:
    """Series are runs alike but for GPUs and nodes; each one's baseline is its timed run with the fewest GPUs."""
    rows = selected_rows(session, experiment_ids, run_ids)
    only = experiment_ids[0] if len(experiment_ids) == 1 and not run_ids else None
    histories = epoch_histories(session, [row.run_id for row in rows]) if history else None
    return ComparePublic(experiment_id=only, data=rows, count=len(rows), histories=histories)


@router.get(
    ".csv",
    response_class=Response,
    summary="The same rows as CSV, one line per run, with a header of the field names",
    responses={200: {"content": {"text/csv": {}}, "description": "the rows of /api/compare as CSV"}},
)
def compare_as_csv(
    session: SessionDep,
    run_ids: RunIds = [],  # noqa: B006
    experiment_ids: ExperimentIds = [],  # noqa: B006
) -> Response:
    rows = selected_rows(session, experiment_ids, run_ids)
    name = experiment_ids[0] if len(experiment_ids) == 1 and not run_ids else "selection"
    return csv_response(rows, f"scalelab-{name}.csv")


def csv_response(rows: list[CompareRow], filename: str) -> Response:
    """Served as a download; the file name holds only server-made ids, safe in a header."""
    return Response(
        compare_csv(rows),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
