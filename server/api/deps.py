"""Dependencies the routes declare, as Annotated aliases."""

from __future__ import annotations

import base64
import secrets
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
from fastapi import Depends, HTTPException, Request, status
from sqlmodel import Session

from server.config import Settings
from server.db import close_quietly
from server.models import User
from server.profiles import ProfileCatalog
from server.scheduler import Scheduler
from server.services import users

# Bounds of paging parameters: far beyond any real use, and within what SQLite and the file system can take.
MAX_SKIP = 10**9
MAX_OFFSET = 2**53


async def get_session(request: Request) -> AsyncIterator[Session]:
    """A session for the request, made and closed in the event loop where that cannot wait: a sync dependency costs
    two hand-offs to the thread pool, each about as much CPU as reading a run (0.2 ms). Making a session touches no
    database (its first query does, in the route's thread); closing one gives its connection back to the pool with
    a rollback, a call into SQLite's library in this process, but a round trip to another database's server, made
    in a thread of its own: in the routes' pool it would queue behind routes that wait for a connection of the
    database's pool, which it holds (seen: 30 s stalls and 500s with 250 clients on PostgreSQL)."""
    engine = request.app.state.engine
    session = Session(engine)
    try:
        yield session
    finally:
        if engine.dialect.name == "sqlite":
            close_quietly(session)
        else:
            with anyio.CancelScope(shield=True):  # a client gone away must not leave the connection out of the pool
                await anyio.to_thread.run_sync(close_quietly, session, limiter=anyio.CapacityLimiter(1))


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_scheduler(request: Request) -> Scheduler:
    scheduler: Scheduler = request.app.state.scheduler
    return scheduler


def get_profiles(request: Request) -> ProfileCatalog:
    catalog: ProfileCatalog = request.app.state.profiles
    return catalog


SESSION_COOKIE = "scalelab_session"
CSRF_HEADER = "X-CSRF-Token"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


_NO_LONGER = "this account may no longer use scalelab here (not a Unix user, or not in the allowed group): ask an admin"


class SignInRequired(HTTPException):
    """401: no valid token or session came with the request."""

    def __init__(self, detail: str) -> None:
        super().__init__(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


def get_current_user(request: Request, session: Annotated[Session, Depends(get_session)]) -> User:
    """Who sends the request: by its bearer token, else by its session cookie (with a CSRF token if it changes
    anything, since a browser sends the cookie whoever made the page that sent the request)."""
    try:
        return _sender(request, session)
    finally:
        give_back_connection(session)


def give_back_connection(session: Session) -> None:
    """End a dependency's use of the request's session: the route runs later, in another of the thread pool's
    threads, and a connection kept meanwhile is held by a request that waits for a thread while every thread may
    be waiting for a connection (a deadlock until the pool's timeout: 500s after 30 s with 250 clients on
    PostgreSQL, whose pool was smaller than the thread pool). What the session loaded stays usable; its next query
    takes a connection again."""
    close_quietly(session)


def _sender(request: Request, session: Session) -> User:
    settings: Settings = request.app.state.settings
    if not settings.auth:
        local = users.local_user(session)
        request.state.user = local
        return local
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token:
        user = users.user_of_token(session, token.strip())
        if user is None:
            raise SignInRequired("this API token is unknown or revoked: ask an admin for a new one")
        if not users.still_allowed(session, user, settings):
            raise SignInRequired(_NO_LONGER)
        request.state.user = user
        return user
    cookie = request.cookies.get(SESSION_COOKIE)
    found = users.session_of_cookie(session, cookie) if cookie else None
    if found is None:
        raise SignInRequired(
            "sign in first: send `Authorization: Bearer <token>` (an admin makes tokens with "
            "`python -m server users add`), or sign in at /login"
        )
    user, web_session = found
    if not users.still_allowed(session, user, settings):
        raise SignInRequired(_NO_LONGER)
    if request.method not in _SAFE_METHODS and not _same(request.headers.get(CSRF_HEADER), web_session.csrf_token):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"missing or wrong {CSRF_HEADER} header: reload the page and try again"
        )
    request.state.user, request.state.csrf_token = user, web_session.csrf_token
    return user


def get_user_by_password_or_current(request: Request, session: Annotated[Session, Depends(get_session)]) -> User:
    """Who asks for a new API token: a name and password sent as HTTP Basic credentials (how `scalelab login` gets
    a first token, checked as the sign-in page checks them), else the sender of the request as for any other."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic" or not request.app.state.settings.auth:
        return get_current_user(request, session)
    try:
        name, _, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        raise SignInRequired("the Basic credentials are not base64 of `name:password` in UTF-8") from None
    # A sync dependency: FastAPI runs it in its thread pool, so PAM's wait blocks no other request.
    try:
        user = users.check_sign_in(session, name, password, request.app.state.settings)
    finally:
        give_back_connection(session)
    if isinstance(user, users.Refusal):
        raise SignInRequired("wrong user name or password" if user.message == users.WRONG_PASSWORD else user.message)
    request.state.user = user
    return user


def _same(given: str | None, expected: str) -> bool:
    return given is not None and secrets.compare_digest(given.encode(), expected.encode())


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
SchedulerDep = Annotated[Scheduler, Depends(get_scheduler)]
ProfilesDep = Annotated[ProfileCatalog, Depends(get_profiles)]
CurrentUser = Annotated[User, Depends(get_current_user)]
UserByPassword = Annotated[User, Depends(get_user_by_password_or_current)]
