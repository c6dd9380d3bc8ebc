"""A card brought into this instance: verified, then read into a new experiment of finished runs, read-only and
marked with where it came from. Its figures are the card's: this server computes them from the same records with
the same code, and verification proved they agree. The fabric its runs' predictions and fabric_degraded flags rest
on (measured or declared on the exporting cluster) is kept as the card's (CarriedFabric), not in this cluster's
fabric store."""

from __future__ import annotations

import json
from pathlib import Path

from sqlmodel import Session

from contract.card import ScalingCard
from contract.rundir import OUTPUT_FILE, SPEC_FILE
from server.config import Settings
from server.errors import Conflict
from server.models import CardOrigin, CarriedFabric, Experiment, Run, User, new_id
from server.services import rundirs
from server.services.cards.loading import CardRefused, load_card
from server.services.cards.verify import check
from server.services.quotas import check_import_quota
from server.services.submission import committed_with_directories

# What a card's run shows as its output: a card carries the records, not the text around them.
CARRIED_OUTPUT = (
    "scalelab: this run was imported from a scaling card, which carries its metric records (its metrics and "
    "figures), not its output\n"
)


def import_card(
    session: Session, card: ScalingCard, settings: Settings, user: User
) -> tuple[Experiment, list[Run], CardOrigin]:
    """The card as a new experiment of the user's, in one transaction. CardRefused (naming each field) when it does
    not verify; QuotaExceeded beyond the user's runs a day; nothing is kept of a card refused."""
    problems = check(card)
    if problems:
        raise CardRefused(problems)
    check_import_quota(session, user, settings, len(card.runs))
    runs: list[Run] = []
    ids: dict[str, str] = {}

    def here(old: str) -> str:
        return ids.setdefault(old, new_id())

    try:
        with committed_with_directories(session, runs):
            experiment, loaded = load_card(
                session,
                card,
                owner=user.name,
                new_id=here,
                run_dir=lambda run_id: str(rundirs.path(settings.runs_dir, run_id)),
            )
            origin = CardOrigin(
                experiment_id=experiment.id,
                url=card.source.url,
                instance=card.source.instance,
                original_id=card.experiment.id,
                content_hash=card.content_hash,
                card_version=card.card_version,
                exported_at=card.source.exported_at,
                exported_by=card.source.exported_by,
                imported_by=user.name,
            )
            session.add(origin)
            for run, part in zip(loaded, card.runs, strict=True):
                if part.provenance.fabric is not None:
                    # Its prediction and fabric_degraded flag rest on its cluster's fabric: kept as the card's.
                    session.add(CarriedFabric(run_id=run.id, fabric=part.provenance.fabric.model_dump(mode="json")))
                # Only the service reads a card's run (no job does): its directory is the service's alone.
                rundirs.create(settings.runs_dir, run.id, mode=0o750)
                runs.append(run)
                run_dir = Path(run.run_dir)
                # The card's batch scripts are a stranger's text: they stay in the card, never where a job runs one.
                rundirs.write_new(run_dir / SPEC_FILE, _json(run.spec), mode=0o640)
                rundirs.write_new(run_dir / OUTPUT_FILE, CARRIED_OUTPUT, mode=0o640)
    except OSError as exc:
        raise rundirs.unwritable(settings.runs_dir, exc, "nothing was imported") from None
    session.refresh(experiment)
    for run in runs:
        session.refresh(run)
    session.refresh(origin)
    return experiment, runs, origin


def _json(spec: dict[str, object]) -> str:
    return json.dumps(spec, indent=2) + "\n"


def refuse_change(session: Session, experiment_id: str, what: str) -> None:
    """Conflict, saying where it came from, when the experiment was imported from a card: it is read-only."""
    origin = session.get(CardOrigin, experiment_id)
    if origin is not None:
        raise Conflict(read_only(experiment_id, origin, what))


def read_only(experiment_id: str, origin: CardOrigin, what: str) -> str:
    where = origin.instance or origin.url or "another instance"
    return (
        f"experiment {experiment_id} was imported from a scaling card (experiment {origin.original_id} of {where}, "
        f"{origin.content_hash[:19]}...): it is read-only and cannot be {what}. Clone it to run its request here"
    )
