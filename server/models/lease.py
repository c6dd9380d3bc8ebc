"""A role that one process at a time holds (the monitor's), until it stops renewing it."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel


class Lease(SQLModel, table=True):
    """One row per role: who holds it, and until when."""

    name: str = Field(primary_key=True)
    holder: str | None = Field(default=None, description="host:pid:nonce of the holding process; None: released")
    expires_at: datetime = Field(description="when another process may take it over, unless renewed before")
    acquired_at: datetime | None = Field(default=None, description="when the current holder took it")
