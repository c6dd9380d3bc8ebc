"""The services' exceptions as HTTP answers, and the error answers each route documents in the OpenAPI schema."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, DisconnectionError

from contract.errors import ErrorBody
from server.db import database_unavailable
from server.errors import (
    Conflict,
    Invalid,
    NotAllowed,
    NotFound,
    OutOfRange,
    OverQuota,
    SchedulerDown,
    SchedulerRefused,
    ServiceError,
    StorageFailed,
)

# How long a client should wait before trying the scheduler again.
RETRY_AFTER_S = 30
# ... and the database: a restarted PostgreSQL is back within seconds.
DATABASE_RETRY_AFTER_S = 5
DATABASE_UNAVAILABLE = (
    "the database cannot be reached just now, so nothing of this request was done: try again in a few seconds; "
    "if this lasts, an admin should check that the database server runs (SCALELAB_DATABASE_URL)"
)

STATUS_OF: dict[type[ServiceError], int] = {
    NotFound: status.HTTP_404_NOT_FOUND,
    NotAllowed: status.HTTP_403_FORBIDDEN,
    Conflict: status.HTTP_409_CONFLICT,
    OutOfRange: status.HTTP_416_RANGE_NOT_SATISFIABLE,
    Invalid: status.HTTP_422_UNPROCESSABLE_CONTENT,
    OverQuota: status.HTTP_429_TOO_MANY_REQUESTS,
    SchedulerRefused: status.HTTP_502_BAD_GATEWAY,
    SchedulerDown: status.HTTP_503_SERVICE_UNAVAILABLE,
    StorageFailed: status.HTTP_507_INSUFFICIENT_STORAGE,
}


def status_of(exc: ServiceError) -> int:
    return next(code for kind, code in STATUS_OF.items() if isinstance(exc, kind))


def _retry_after(exc: ServiceError) -> dict[str, str] | None:
    """When asking again may succeed: the scheduler in a while, a daily quota once it frees up."""
    if isinstance(exc, SchedulerDown):
        return {"Retry-After": str(RETRY_AFTER_S)}
    if isinstance(exc, OverQuota) and exc.retry_after_s:
        return {"Retry-After": str(exc.retry_after_s)}
    return None


async def service_error(_request: Request, exc: Exception) -> JSONResponse:
    """A 422 is shaped as FastAPI's own (one item per field); every other answer has the message as `detail`, and
    the fields a client acts on beside it."""
    if not isinstance(exc, ServiceError):
        raise exc
    if isinstance(exc, Invalid):
        body: dict[str, Any] = {"detail": jsonable_encoder(exc.errors)}
    else:
        body = ErrorBody(detail=exc.message, **exc.fields).model_dump(exclude_none=True)
    return JSONResponse(body, status_code=status_of(exc), headers=_retry_after(exc))


async def database_error(_request: Request, exc: Exception) -> JSONResponse:
    """A 503 while the database is restarting or down (the request's transaction was rolled back whole); any other
    database error stays a 500, as it is a bug."""
    if not (isinstance(exc, DBAPIError | DisconnectionError) and database_unavailable(exc)):
        raise exc
    body = ErrorBody(detail=DATABASE_UNAVAILABLE).model_dump(exclude_none=True)
    return JSONResponse(
        body,
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
    )


def add_handlers(app: FastAPI) -> None:
    app.exception_handler(ServiceError)(service_error)
    app.exception_handler(DBAPIError)(database_error)
    app.exception_handler(DisconnectionError)(database_error)


Responses = dict[int | str, dict[str, Any]]

# Documented on the routes that can answer them, so that the OpenAPI schema lists every status a client meets.
SIGN_IN: Responses = {401: {"description": "no valid API token or session came with the request: sign in"}}
# Every route that reads a body: the 413 is server/api/limits.py's.
UNREADABLE_BODY: Responses = {
    400: {"description": "the body cannot be read as text (it is not UTF-8)"},
    413: {
        "model": ErrorBody,
        "description": "the body is larger than the server takes on this route (`limit_bytes`, a setting); none of "
        "it was kept",
    },
}
NOT_OWNER: Responses = {403: {"description": "only the owner or an admin may change it"}}
OVER_QUOTA: Responses = {429: {"description": "the runs would take the user beyond a quota; nothing was submitted"}}
NO_STORAGE: Responses = {507: {"description": "the run directories cannot be written; nothing was kept"}}


def not_found(what: str) -> Responses:
    return {404: {"description": f"no such {what}"}}
