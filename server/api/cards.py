"""Scaling cards: an experiment exported as one file that proves its own figures, a card verified, and a card
imported as a read-only experiment."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response, status

from contract.card import ScalingCard
from server.api.deps import CurrentUser, SessionDep, SettingsDep
from server.api.errors import NO_STORAGE, UNREADABLE_BODY, Responses, not_found
from server.models import CardOriginPublic, CardVerdict, ExperimentCreated
from server.services import experiments
from server.services.cards.carry import import_card
from server.services.cards.export import export_card
from server.services.cards.verify import verdict
from server.services.visibility import visible_experiment

router = APIRouter(prefix="/api", tags=["cards"])

_NOT_A_CARD: Responses = {
    422: {
        "description": "the body is no scaling card: the JSON is broken, a field is missing, of the wrong type or "
        "beyond its bounds (nesting, lengths, counts, non-finite numbers); each problem names the field"
    }
}


@router.get(
    "/experiments/{experiment_id}/card",
    response_model=ScalingCard,
    summary="The experiment's scaling card: one JSON file with its request, scripts, provenance, raw records and "
    "figures, and a content hash",
    responses={
        **not_found("experiment"),
        409: {
            "description": "some runs have not ended, or what they stored cannot be carried by a card (the "
            "detail says which)"
        },
    },
)
def card_of_experiment(
    experiment_id: str, request: Request, session: SessionDep, settings: SettingsDep, user: CurrentUser
) -> Response:
    """A download (scalelab-ID-card.json). Anyone who may see the experiment may export it. Every run must have
    ended and its output been read. Check one with POST /api/cards/verify, bring one in with POST /api/cards."""
    experiment = visible_experiment(session, user, experiment_id)
    card = export_card(session, experiment, settings, user, str(request.base_url))
    return Response(
        json.dumps(card, ensure_ascii=False, allow_nan=False).encode(),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="scalelab-{experiment.id}-card.json"'},
    )


@router.post(
    "/cards/verify",
    response_model=CardVerdict,
    summary="Verify a scaling card: recompute every figure from its records with this server's code; each "
    "difference names its field",
    responses={**UNREADABLE_BODY, **_NOT_A_CARD},
)
def verify_card(card: ScalingCard) -> CardVerdict:
    """The records are read back as ingestion reads a run's output, into a database of their own, and the figures
    computed as /compare and /scaling compute them; the card's figures, provenance and hash are checked against
    that. `verified` false: `problems` names each field that is not what the records give (a figure edited, a
    record removed, a provenance field missing). Nothing is kept."""
    return verdict(card)


@router.post(
    "/cards",
    status_code=status.HTTP_201_CREATED,
    response_model=ExperimentCreated,
    summary="Import a scaling card as a read-only experiment marked with where it came from",
    responses={
        **UNREADABLE_BODY,
        422: {"description": "the body is no scaling card, or it does not verify: each problem names the field"},
        429: {"description": "its runs would take you beyond max_runs_per_day; nothing is kept"},
        **NO_STORAGE,
    },
)
def import_scaling_card(
    card: ScalingCard, session: SessionDep, settings: SettingsDep, user: CurrentUser
) -> ExperimentCreated:
    """Verified first (as POST /api/cards/verify), then read into a new experiment of yours with one finished run per
    run of the card: its figures are the card's, computed here from the same records. It cannot be cancelled,
    resubmitted or rerun, nor its runs deleted one by one (409); it may be shared, cloned (to run its request here)
    and deleted."""
    experiment, runs, origin = import_card(session, card, settings, user)
    created = experiments.experiment_created(session, experiment, runs)
    created.card = CardOriginPublic.model_validate(origin, from_attributes=True)
    return created
