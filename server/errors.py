"""What a service refuses or fails at: one exception per kind of answer, each worded for the user.

Services raise these and know nothing of HTTP; server/api/errors.py gives each kind its status code, and the pages
show the message. `fields` carry what a client acts on without reading the message (contract/errors.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

# Where a problem is in the request, as pydantic names it (("body", "grid"), ("query", "index")...), and its message.
Problem = tuple[tuple[str | int, ...], str]


class ServiceError(Exception):
    def __init__(self, message: str, **fields: str) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields

    def __str__(self) -> str:
        return self.message


class NotFound(ServiceError):
    """No such thing (experiment, run, profile)."""


class NotAllowed(ServiceError):
    """The user may look at the thing but not change it."""


class Conflict(ServiceError):
    """The thing's state forbids the change (a run that has ended cannot be cancelled...)."""


class Invalid(ServiceError):
    """The request validated as a shape but cannot be done; each problem names the field it is about."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        # As pydantic reports a field, so that a 422 reads alike whoever found the problem.
        self.errors: list[dict[str, Any]] = [
            {"type": "value_error", "loc": loc, "msg": message} for loc, message in self.problems
        ]
        super().__init__("; ".join(message for _, message in self.problems))

    @classmethod
    def of(cls, exc: ValidationError, *where: str | int) -> Invalid:
        """A model validated by a service (not by FastAPI), its errors placed at `where` in the request."""
        errors = [
            {key: value for key, value in error.items() if key != "input"} | {"loc": (*where, *error["loc"])}
            for error in exc.errors(include_url=False)
        ]
        invalid = cls(((*where, *error["loc"]), str(error["msg"])) for error in exc.errors(include_url=False))
        invalid.errors = errors
        return invalid


class OutOfRange(ServiceError):
    """A read from beyond the end (an offset past the output's size)."""


class OverQuota(ServiceError):
    """The change would take the user beyond a quota; nothing was done."""

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s  # when waiting alone lifts it (the daily quota)


class SchedulerRefused(ServiceError):
    """The scheduler answered, and refused (it could not cancel a job...)."""


class SchedulerDown(ServiceError):
    """The scheduler cannot be reached now; what was kept is named in the fields, to retry later."""


class StorageFailed(ServiceError):
    """The run directories cannot be written; nothing was kept."""
