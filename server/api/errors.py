"""Errors the routes answer with beyond plain validation, worded for the user."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from fastapi import HTTPException, status
from fastapi.exceptions import RequestValidationError

from server.config import Settings

log = logging.getLogger(__name__)

# How long a client should wait before trying the scheduler again.
RETRY_AFTER_S = 30


def service_unavailable(message: str) -> HTTPException:
    """503: the scheduler cannot be reached now; Retry-After says when to try again."""
    return HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, message, headers={"Retry-After": str(RETRY_AFTER_S)})


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
