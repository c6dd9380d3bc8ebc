"""An experiment written as a scaling card: every run's script, provenance, accounting and records as stored, the
figures computed from them, and the content hash over it all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlmodel import Session, col, select

from contract.card import CARD_VERSION, ScalingCard, hashed
from server import __version__
from server.config import Settings
from server.errors import Conflict
from server.models import Experiment, Run, RunAccounting, User, utcnow
from server.services import rundirs
from server.services.cards.loading import figures_json, figures_of, provenance_of, stored_records
from server.services.runs import runs_of_experiment

# A placeholder while the card is validated: the hash is taken over the rest, then set.
_NO_HASH = "sha256:" + "0" * 64


def export_card(
    session: Session, experiment: Experiment, settings: Settings, user: User, url: str | None
) -> dict[str, Any]:
    """The experiment's card as JSON. Conflict when a run has not ended (its figures could still change) or when
    what it stored cannot be carried by a card (a NaN loss, which JSON cannot hold)."""
    runs = runs_of_experiment(session, experiment.id)
    if not runs:
        raise Conflict(f"experiment {experiment.id} has no runs: a card carries figures, and it has none")
    live = [run.id for run in runs if not (run.state.is_final and run.ingest_done)]
    if live:
        raise Conflict(
            f"runs {', '.join(live[:5])} of experiment {experiment.id} have not ended (or their output is still "
            "being read): a card holds final figures only; export it once they have"
        )
    ids = [run.id for run in runs]
    records = stored_records(session, ids)
    accounting = {
        row.run_id: row for row in session.exec(select(RunAccounting).where(col(RunAccounting.run_id).in_(ids)))
    }
    provenance = provenance_of(session, runs)
    compare, analysis = figures_of(session, experiment.id)
    card = {
        "card_version": CARD_VERSION,
        "content_hash": _NO_HASH,
        "source": {
            "url": url,
            "instance": settings.instance_name,
            "scalelab_version": __version__,
            "exported_at": utcnow().isoformat(),
            "exported_by": user.name,
        },
        "experiment": {
            "id": experiment.id,
            "name": experiment.name,
            "owner": experiment.owner,
            "created_at": experiment.created_at.isoformat(),
            "request": experiment.request,
        },
        "runs": [_run(run, records[run.id], accounting.get(run.id), provenance[run.id]) for run in runs],
        "figures": figures_json(compare, analysis),
    }
    try:
        checked = ScalingCard.model_validate(card)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise Conflict(f"experiment {experiment.id} cannot be put on a card: {where}: {first['msg']}") from None
    return hashed(checked.model_dump(mode="json"))


def _run(
    run: Run, records: list[tuple[int, dict[str, Any]]], accounting: RunAccounting | None, provenance: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": run.id,
        "position": run.position,
        "state": str(run.state),
        "spec": run.spec,
        "created_at": run.created_at.isoformat(),
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "ended_at": run.ended_at.isoformat() if run.ended_at else None,
        "exit_code": run.exit_code,
        "failure_kind": None if run.failure_kind is None else str(run.failure_kind),
        "failure_detail": run.failure_detail,
        "message": run.message,
        "ingest_stopped": run.ingest_stopped,
        "parse_errors": run.parse_errors,
        "records_read": run.records_read,
        "batch_script": rundirs.read_script(Path(run.run_dir), rundirs.file_owner(run)) if run.run_dir else None,
        "provenance": provenance,
        "accounting": None if accounting is None else accounting.model_dump(mode="json", exclude={"run_id"}),
        "records": [{"offset": offset, "record": record} for offset, record in records],
    }
