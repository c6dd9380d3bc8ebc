"""Dependencies the routes declare, as Annotated aliases."""

from __future__ import annotations

import base64
import secrets
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated

import anyio
from fastapi import Depends, HTTPException, Request, status
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from server.config import Settings
from server.db import close_quietly
from server.models import User
from server.profiles import ProfileCatalog
from server.scheduler import Scheduler
from server.services import signed_in, signin_throttle, users
from server.services.signed_in import SignedIn

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


# What the app holds, read in the event loop: FastAPI runs a plain `def` dependency in the thread pool, and on a
# loaded server each such hop waits its turn for a thread again, so a page with one took twice as long as one without.
async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_scheduler(request: Request) -> Scheduler:
    scheduler: Scheduler = request.app.state.scheduler
    return scheduler


async def get_profiles(request: Request) -> ProfileCatalog:
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


async def get_current_user(request: Request) -> User:
    """Who sends the request: by its bearer token, else by its session cookie (with a CSRF token if it changes
    anything, since a browser sends the cookie whoever made the page that sent the request). A sender seen within
    `signed_in_ttl_s` is admitted here in the event loop (server.services.signed_in); else the database says, in
    the thread pool, with a session of its own that is closed before the route runs: the route runs later, in
    another thread, and a connection kept meanwhile would be held by a request that waits for a thread while
    every thread may be waiting for a connection (500s after 30 s with 250 clients on PostgreSQL)."""
    credential = _credential(request)
    if credential is None:
        raise SignInRequired(
            "sign in first: send `Authorization: Bearer <token>` (an admin makes tokens with "
            "`python -m server users add`), or sign in at /login"
        )
    memo: SignedIn = request.app.state.signed_in
    sender = memo.recall(credential)
    if sender is None:
        return await run_in_threadpool(_look_up, request, credential)
    return _admit(request, sender.user, sender.csrf_token)


def bearer_digest(request: Request) -> str | None:
    """The digest of the request's bearer token, if it came with one."""
    credential = _credential(request)
    return credential[1] if credential is not None and credential[0] == "token" else None


def _credential(request: Request) -> tuple[str, str] | None:
    """("token", its digest), ("cookie", its digest), ("local", "") where sign-in is off; None: none came."""
    if not request.app.state.settings.auth:
        return ("local", "")
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return ("token", users.digest(token.strip()))
    cookie = request.cookies.get(SESSION_COOKIE)
    return ("cookie", users.digest(cookie)) if cookie else None


def _look_up(request: Request, credential: tuple[str, str]) -> User:
    memo: SignedIn = request.app.state.signed_in
    seen_at = signed_in.generation()
    with Session(request.app.state.engine) as session:
        user, csrf_token, ends = _sender(session, credential, request.app.state.settings)
        memo.keep(credential, user, seen_at, csrf_token, ends)
    return _admit(request, user, csrf_token)


def _sender(
    session: Session, credential: tuple[str, str], settings: Settings
) -> tuple[User, str | None, datetime | None]:
    """Who the credential stands for, a session's CSRF token, and when the credential ends (a session's end, a
    token's expiry): the memo never keeps it past then."""
    kind, digest = credential
    if kind == "local":
        return users.local_user(session), None, None
    if kind == "token":
        found = users.token_sender(session, digest)
        if isinstance(found, users.TokenRefused):
            raise SignInRequired(found.message)
        user, csrf_token, ends = found[0], None, found[1].expires_at
    else:
        signed_in_session = users.session_of_cookie(session, digest)
        if signed_in_session is None:
            raise SignInRequired("your session ended or was signed out: sign in again at /login")
        user, csrf_token, ends = signed_in_session[0], signed_in_session[1].csrf_token, signed_in_session[1].expires_at
    if not users.still_allowed(session, user, settings):
        raise SignInRequired(_NO_LONGER)
    return user, csrf_token, ends


def _admit(request: Request, user: User, csrf_token: str | None) -> User:
    changes = request.method not in _SAFE_METHODS
    if csrf_token is not None and changes and not _same(request.headers.get(CSRF_HEADER), csrf_token):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"missing or wrong {CSRF_HEADER} header: reload the page and try again"
        )
    request.state.user = user
    if csrf_token is not None:
        request.state.csrf_token = csrf_token
    return user


async def get_user_by_password_or_current(request: Request) -> User:
    """Who asks for a new API token: a name and password sent as HTTP Basic credentials (how `scalelab login` gets
    a first token, checked as the sign-in page checks them), else the sender of the request as for any other."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic" or not request.app.state.settings.auth:
        return await get_current_user(request)
    try:
        name, _, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        raise SignInRequired("the Basic credentials are not base64 of `name:password` in UTF-8") from None
    user = await signin_throttle.sign_in_with_password(
        request.app.state.engine,
        request.app.state.password_checks,
        name,
        password,
        client_address(request),
        request.app.state.settings,
    )
    if isinstance(user, signin_throttle.Throttled | signin_throttle.Busy):
        code = status.HTTP_429_TOO_MANY_REQUESTS if isinstance(user, signin_throttle.Throttled) else 503
        raise HTTPException(code, user.message, headers={"Retry-After": str(user.retry_after_s)})
    if isinstance(user, users.Refusal):
        raise SignInRequired("wrong user name or password" if user.message == users.WRONG_PASSWORD else user.message)
    request.state.user = user
    return user


def client_address(request: Request) -> str:
    """Where a sign-in comes from, as the server was told (behind a proxy: what uvicorn's --proxy-headers trusts)."""
    return request.client.host if request.client else "unknown"


def _same(given: str | None, expected: str) -> bool:
    return given is not None and secrets.compare_digest(given.encode(), expected.encode())


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
SchedulerDep = Annotated[Scheduler, Depends(get_scheduler)]
ProfilesDep = Annotated[ProfileCatalog, Depends(get_profiles)]
CurrentUser = Annotated[User, Depends(get_current_user)]
UserByPassword = Annotated[User, Depends(get_user_by_password_or_current)]
