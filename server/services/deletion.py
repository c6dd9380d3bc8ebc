"""Deleting runs that have ended: their rows in every table that refers to them, then their directories."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import Table, delete
from sqlmodel import Session, SQLModel, col

from server.models import Experiment, Run
from server.services import rundirs


def _tables_referring_to_runs() -> list[Table]:
    """Every table with a foreign key to run.id, found from the schema so that a table added later is not missed."""
    return [
        table
        for table in SQLModel.metadata.sorted_tables
        if any(fk.column.table.name == "run" for column in table.columns for fk in column.foreign_keys)
    ]


def delete_runs(session: Session, runs: Sequence[Run], experiment: Experiment | None = None) -> None:
    """Delete the runs (all ended; the caller checks) and, if given, their experiment, in one transaction; then
    their directories, once nothing refers to them any more."""
    ids = [run.id for run in runs]
    for table in _tables_referring_to_runs():
        for column in table.columns:
            if any(fk.column.table.name == "run" for fk in column.foreign_keys):
                session.exec(delete(table).where(column.in_(ids)))
    session.exec(delete(Run).where(col(Run.id).in_(ids)))
    if experiment is not None:
        session.delete(experiment)
    session.commit()
    for run in runs:
        rundirs.remove(Path(run.run_dir))
