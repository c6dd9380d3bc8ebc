"""Cluster profiles: the partitions, limits, container runtime and sbatch options runs can use."""

from __future__ import annotations

from fastapi import APIRouter

from server.api.deps import ProfilesDep
from server.api.errors import not_found
from server.errors import NotFound
from server.models import ProfilesPublic
from server.profiles import ClusterProfile

router = APIRouter(prefix="/api/profiles", tags=["profiles"])


@router.get("", response_model=ProfilesPublic, summary="List the cluster profiles runs can use")
def list_profiles(catalog: ProfilesDep) -> ProfilesPublic:
    profiles = [catalog.profiles[name] for name in sorted(catalog.profiles)]
    return ProfilesPublic(data=profiles, count=len(profiles), default=catalog.default)


@router.get(
    "/{name}", response_model=ClusterProfile, summary="One cluster profile", responses=not_found("cluster profile")
)
def get_profile(name: str, catalog: ProfilesDep) -> ClusterProfile:
    if name not in catalog.profiles:
        raise NotFound(f"no cluster profile {name!r}")
    return catalog.profiles[name]
