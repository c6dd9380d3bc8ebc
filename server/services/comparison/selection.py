"""Which runs a comparison holds: the selection query (only what the viewer may see), its checks and limits, and
each run's head, which says whether its figures may be kept and under which key."""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from sqlalchemy import String, cast
from sqlalchemy import select as sa_select  # sqlmodel's select takes at most four columns
from sqlmodel import Session, col, or_, select

from contract.states import RunState
from server.errors import Invalid
from server.models import Experiment, Run, RunAccounting, ScalingMode, User
from server.services import visibility
from server.services.read_cache import FinishedVersion, finished_version

# A dashboard of more runs than this is unreadable, and the answer would grow without bound.
MAX_COMPARED_RUNS = 500
MAX_COMPARED_EXPERIMENTS = 50


# A run as a selection reads it first: what says whether its figures may be kept, and under which key.
class Head(NamedTuple):
    run_id: str
    experiment_id: str
    key: tuple[FinishedVersion, RunState, ScalingMode] | None  # None: its figures may still change
    accounting: tuple[str | None, ...]  # its accounting as stored (all None: none yet), which a kept answer holds


class Selection(NamedTuple):
    heads: list[Head]  # in the comparison's order
    modes: dict[str, ScalingMode]  # experiment id -> its scaling mode


_HEAD_COLUMNS = [col(column) for column in (Run.id, Run.experiment_id, Run.state, Run.attempt, Run.log_offset)]
_ACCOUNTING_AS_STORED = [cast(column, String) for column in RunAccounting.__table__.columns]  # type: ignore[attr-defined]


def selection_of(
    session: Session, experiment_ids: Collection[str], run_ids: Collection[str], viewer: User | None = None
) -> Selection:
    """The runs of these experiments and these runs (only those the viewer may see, if given), with their accounting
    as stored, in one query: each list of ids in a query's IN is written out again at every execution, and for a
    dashboard of 200 runs three such queries were most of what its kept answer cost."""
    query = (
        sa_select(*_HEAD_COLUMNS, col(Run.ingest_done), *_ACCOUNTING_AS_STORED)
        .join_from(Run, RunAccounting, RunAccounting.run_id == Run.id, isouter=True)  # type: ignore[arg-type]
        .where(or_(col(Run.experiment_id).in_(experiment_ids), col(Run.id).in_(run_ids)))
        .order_by(col(Run.created_at), col(Run.position))
    )
    found = session.execute(query if viewer is None else visibility.only_visible(query, viewer, Run.experiment_id))
    rows = found.all()
    modes = _scaling_modes(session, {row[1] for row in rows})
    heads = []
    for run_id, experiment_id, state, attempt, log_offset, ingest_done, *accounting in rows:
        finished = finished_version(run_id, attempt, log_offset, ingest_done)
        key = None if finished is None else (finished, state, modes.get(experiment_id, "strong"))
        heads.append(Head(run_id, experiment_id, key, tuple(accounting)))
    return Selection(heads, modes)


def _scaling_modes(session: Session, experiment_ids: Collection[str]) -> dict[str, ScalingMode]:
    requests = session.exec(select(Experiment.id, Experiment.request).where(col(Experiment.id).in_(experiment_ids)))
    return {
        experiment_id: "weak" if request.get("scaling") == "weak" else "strong" for experiment_id, request in requests
    }


def checked_selection(
    session: Session, experiment_ids: Collection[str], run_ids: Collection[str], viewer: User
) -> Selection:
    """The selection, if it names only existing runs and experiments the viewer may see (one the viewer may not see
    is named as one that does not exist), and at most MAX_COMPARED_RUNS runs."""
    if not experiment_ids and not run_ids:
        raise Invalid([(("query", "run_id"), "name at least one run_id or experiment_id")])
    selection = selection_of(session, experiment_ids, run_ids, viewer)
    # A run named is missing from a selection of what the viewer may see only if it does not exist or is not
    # theirs to see: both are answered alike.
    _refuse_unknown(set(run_ids) - {head.run_id for head in selection.heads}, "run_id")
    _require_experiments(session, experiment_ids, viewer)
    if len(selection.heads) > MAX_COMPARED_RUNS:
        too_many = f"the selection holds {len(selection.heads)} runs; compare at most {MAX_COMPARED_RUNS}"
        raise Invalid([(("query", "experiment_id"), too_many)])
    return selection


def _require_experiments(session: Session, experiment_ids: Collection[str], viewer: User) -> None:
    """A selection naming an experiment that does not exist (or the viewer may not see) is refused."""
    named = select(Experiment.id).where(col(Experiment.id).in_(experiment_ids))
    found: set[str] = set(session.exec(visibility.only_visible(named, viewer, Experiment.id)))
    _refuse_unknown(set(experiment_ids) - found, "experiment_id")


def _refuse_unknown(unknown: Collection[str], field: str) -> None:
    """Refused, naming the parameter and the first few unknown ids."""
    if unknown:
        missing = sorted(unknown)
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        what = field.removesuffix("_id")
        raise Invalid([(("query", field), f"no {what} {', '.join(map(repr, missing[:3]))}{more}")])
