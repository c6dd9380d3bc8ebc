"""A scaling card brought in from another instance: where its experiment came from and the fabric its runs' figures
were drawn from (their tables), and what verifying a card answers. The card itself is contract.card's."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import JSON, Column
from sqlmodel import Field as SQLField
from sqlmodel import SQLModel

from server.models.common import utcnow


class CardOriginBase(SQLModel):
    url: str | None = SQLField(default=None, max_length=4096, description="the URL the card was exported from")
    instance: str | None = SQLField(default=None, max_length=4096, description="that server's name for itself")
    original_id: str = SQLField(max_length=4096, description="the experiment's id there")
    content_hash: str = SQLField(max_length=80, description="the card's content hash, sha256:...")
    card_version: int = SQLField(description="the card's format")
    exported_at: datetime = SQLField(description="when it was exported there")
    exported_by: str | None = SQLField(default=None, max_length=4096, description="who exported it there")
    imported_at: datetime = SQLField(default_factory=utcnow, description="when it was imported here")
    imported_by: str = SQLField(max_length=64, description="who imported it here")


class CardOrigin(CardOriginBase, table=True):
    """An experiment imported from a scaling card: read-only, its figures the card's (verified on import)."""

    __tablename__ = "card_origin"

    experiment_id: str = SQLField(foreign_key="experiment.id", primary_key=True, max_length=16)


class CarriedFabric(SQLModel, table=True):
    """A run's fabric as a scaling card carries it (contract.card.CardFabric, as JSON): the fits its prediction read
    and the bands its pre-flights were judged against, measured or declared on the exporting cluster. Kept apart from
    this instance's fabric store, whose probes are of its own cluster: the card's run alone reads it, for its
    prediction and its fabric_degraded flag (server/services/fabric.py: carried)."""

    __tablename__ = "card_fabric"

    run_id: str = SQLField(foreign_key="run.id", primary_key=True, max_length=16)
    fabric: dict[str, Any] = SQLField(sa_column=Column(JSON, nullable=False))


class CardOriginPublic(CardOriginBase):
    pass


class CardProblem(BaseModel):
    field: str = Field(description="where in the card, as a path: runs[0].provenance.image_digest")
    message: str = Field(description="what is wrong there")


class CardVerdict(BaseModel):
    verified: bool = Field(description="every figure is what the card's records give, its hash is its content's")
    content_hash: str = Field(description="the card's content hash, as it says it")
    runs: int
    records: int = Field(description="the records recomputed from, all runs together")
    problems: list[CardProblem] = Field(description="each problem, naming the field; none when verified")
