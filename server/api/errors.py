"""Errors the routes answer with beyond plain validation, worded for the user."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from fastapi import HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlmodel import Session

from contract.errors import ErrorBody
from contract.spec import RunSpec
from server.config import Settings
from server.models import User
from server.services.quotas import QuotaExceeded, check_quotas

log = logging.getLogger(__name__)

# How long a client should wait before trying the scheduler again.
RETRY_AFTER_S = 30


class ApiError(HTTPException):
    """An error answer with fields beside `detail` (contract/errors.py's ErrorBody), for clients to act on."""

    def __init__(self, status_code: int, detail: str, headers: dict[str, str] | None = None, **fields: str) -> None:
        super().__init__(status_code, detail, headers=headers)
        self.fields = fields


async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
    body = ErrorBody(detail=exc.detail, **exc.fields).model_dump(exclude_none=True)
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


def service_unavailable(message: str, **fields: str) -> HTTPException:
    """503: the scheduler cannot be reached now; Retry-After says when to try again. `fields` name what was kept."""
    return ApiError(status.HTTP_503_SERVICE_UNAVAILABLE, message, {"Retry-After": str(RETRY_AFTER_S)}, **fields)


def invalid(problems: Iterable[tuple[tuple[str | int, ...], str]]) -> RequestValidationError:
    """A 422 shaped like pydantic's, for problems found after the request itself validated: (location, message)."""
    return RequestValidationError(
        [{"type": "value_error", "loc": loc, "msg": message, "input": None} for loc, message in problems]
    )


def storage_error(settings: Settings, exc: OSError, outcome: str) -> HTTPException:
    log.error("cannot write run directories under %s: %s", settings.runs_dir, exc)
    return HTTPException(
        status.HTTP_507_INSUFFICIENT_STORAGE,
        f"cannot write the run directories ({exc.strerror}); {outcome}. "
        "Ask the operator to check the runs directory's space and permissions.",
    )


def may_change(user: User | None, owner: str | None) -> bool:
    """Everyone signed in may look; only the owner or an admin may cancel, resubmit or delete."""
    return user is not None and (user.is_admin or (owner is not None and owner == user.name))


def require_owner(user: User, owner: str | None, what: str) -> None:
    """403 unless the user may change the thing."""
    if may_change(user, owner):
        return
    whose = f"{owner}'s" if owner else "from before there were users, so an admin's"
    raise HTTPException(status.HTTP_403_FORBIDDEN, f"{what} is {whose} to change: only its owner or an admin may")


def over_quota(exc: QuotaExceeded) -> HTTPException:
    """429: the user's quota would be exceeded; nothing was created or submitted."""
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else None
    return HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, f"{exc} Nothing was submitted.", headers=headers)


def checked_quotas(session: Session, user: User, settings: Settings, specs: Sequence[RunSpec], *, new: bool) -> None:
    try:
        check_quotas(session, user, settings, specs, new=new)
    except QuotaExceeded as exc:
        raise over_quota(exc) from None


Responses = dict[int | str, dict[str, Any]]

# Documented on the routes that can answer them, so that the OpenAPI schema lists every status a client meets.
SIGN_IN: Responses = {401: {"description": "no valid API token or session came with the request: sign in"}}
UNREADABLE_BODY: Responses = {400: {"description": "the body cannot be read as text (it is not UTF-8)"}}
NOT_OWNER: Responses = {403: {"description": "only the owner or an admin may change it"}}
OVER_QUOTA: Responses = {429: {"description": "the runs would take the user beyond a quota; nothing was submitted"}}
NO_STORAGE: Responses = {507: {"description": "the run directories cannot be written; nothing was kept"}}


def not_found(what: str) -> Responses:
    return {404: {"description": f"no such {what}"}}
