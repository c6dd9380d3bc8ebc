"""Each run's stored records of one kind, read back in output order: the one query that the comparison, the code
check and the run time share (a requeued job prints its records again, so readers that want the latest take it)."""

from __future__ import annotations

from collections.abc import Collection
from typing import TypeVar

from pydantic import BaseModel
from sqlmodel import Session, col, select

from server.models import Metric

Record = TypeVar("Record", bound=BaseModel)


def records_by_run(
    session: Session, run_ids: Collection[str], kind: str, model: type[Record]
) -> dict[str, list[Record]]:
    """The records of `kind` of each run, as `model`, in the order the run printed them (none for a run without)."""
    rows = session.exec(
        select(Metric.run_id, Metric.record)
        .where(col(Metric.run_id).in_(run_ids), Metric.kind == kind)
        .order_by(col(Metric.run_id), col(Metric.offset))
    )
    found: dict[str, list[Record]] = {}
    for run_id, record in rows:
        found.setdefault(run_id, []).append(model.model_validate(record))
    return found
