"""Deleting runs that have ended: their rows in every table that refers to them, then their directories.

Where jobs run as their users, a run's directory is the user's (its job made it): deleting the run removes
scalelab's record of it and the service's copy of its script, and the directory stays with its user.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import Table, delete
from sqlmodel import Session, SQLModel, col

from server.errors import Conflict
from server.models import CardOrigin, Experiment, ExperimentPlan, Run, User
from server.runstate import require_owner, why_not_delete
from server.services import rundirs
from server.services.experiments import get_experiment
from server.services.runs import get_run, runs_of_experiment

log = logging.getLogger(__name__)


def _tables_referring_to_runs() -> list[Table]:
    """Every table with a foreign key to run.id, found from the schema so that a table added later is not missed."""
    return [
        table
        for table in SQLModel.metadata.sorted_tables
        if any(fk.column.table.name == "run" for column in table.columns for fk in column.foreign_keys)
    ]


def _delete(session: Session, runs: Sequence[Run], experiment: Experiment | None = None) -> None:
    """Delete the runs (all ended) and, if given, their experiment, in one transaction; then
    their directories, once nothing refers to them any more."""
    ids = [run.id for run in runs]
    for table in _tables_referring_to_runs():
        for column in table.columns:
            if any(fk.column.table.name == "run" for fk in column.foreign_keys):
                session.exec(delete(table).where(column.in_(ids)))
    session.exec(delete(Run).where(col(Run.id).in_(ids)))
    if experiment is not None:
        session.exec(delete(CardOrigin).where(col(CardOrigin.experiment_id) == experiment.id))
        session.exec(delete(ExperimentPlan).where(col(ExperimentPlan.experiment_id) == experiment.id))
        session.delete(experiment)
    session.commit()
    for run in runs:
        if not rundirs.remove(Path(run.run_dir)):
            log.info(
                "run %s deleted from scalelab; its directory %s belongs to its user %s and stays: only they may "
                "delete it",
                run.id,
                run.run_dir,
                run.owner,
            )


def delete_experiment(session: Session, experiment_id: str, user: User) -> None:
    """An experiment whose runs have all ended, with its runs; only its owner or an admin may."""
    experiment = get_experiment(session, experiment_id)
    require_owner(user, experiment.owner, f"experiment {experiment_id}")
    runs = runs_of_experiment(session, experiment_id)
    live = [run.id for run in runs if why_not_delete(run)]
    if live:
        raise Conflict(
            f"{len(live)} runs of experiment {experiment_id} have not ended ({', '.join(live[:5])}): cancel them first"
        )
    _delete(session, runs, experiment)


def delete_run(session: Session, run_id: str, user: User) -> None:
    """A run that has ended; its experiment stays, with its other runs. Only its owner or an admin may."""
    run = get_run(session, run_id)
    require_owner(user, run.owner, f"run {run_id}")
    if why := why_not_delete(run):
        raise Conflict(why)
    _delete(session, [run])
