"""The listing of cluster profiles. A profile itself is configuration read from files (server.profiles), not a
table, so only the response that wraps the list lives here."""

from __future__ import annotations

from pydantic import BaseModel, Field

from server.profiles import ClusterProfile


class ProfilesPublic(BaseModel):
    data: list[ClusterProfile]
    count: int
    default: str = Field(description="the profile of runs that name none")
