"""Dependencies the routes declare, as Annotated aliases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlmodel import Session

from server.config import Settings
from server.profiles import ProfileCatalog
from server.scheduler import Scheduler

# Bounds of paging parameters: far beyond any real use, and within what SQLite and the file system can take.
MAX_SKIP = 10**9
MAX_OFFSET = 2**53


def get_session(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine) as session:
        yield session


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_scheduler(request: Request) -> Scheduler:
    scheduler: Scheduler = request.app.state.scheduler
    return scheduler


def get_profiles(request: Request) -> ProfileCatalog:
    catalog: ProfileCatalog = request.app.state.profiles
    return catalog


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
SchedulerDep = Annotated[Scheduler, Depends(get_scheduler)]
ProfilesDep = Annotated[ProfileCatalog, Depends(get_profiles)]
