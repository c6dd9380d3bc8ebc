"""The body of the REST API's error answers, beyond FastAPI's `detail`: fields a client acts on without reading
the English of the message."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# The `type` of a 422 item that names a grid combination which cannot run: submitting with on_invalid "skip" (the
# CLI's --skip-invalid) leaves such combinations out, and no other problem.
UNRUNNABLE = "unrunnable"
# Why a user may not run a program where every job runs as the service's own account: the `type` of the 422 item at
# base.kind, and the `reason` of a 403 (resubmitting a program run).
PROGRAMS_ADMIN_ONLY = "programs_admin_only"


class ErrorBody(BaseModel):
    """Every error answer has `detail`: text, or (422) one item per invalid field with its location."""

    model_config = ConfigDict(extra="allow")

    detail: str | list[dict[str, Any]] = Field(description="what went wrong and what to do, or (422) each problem")
    reason: str | None = Field(
        default=None,
        description=f"why, as a word a client acts on: {PROGRAMS_ADMIN_ONLY} (only admins may run programs here)",
    )
    experiment_id: str | None = Field(
        default=None,
        description="an experiment that was kept although the request failed (its runs are submit_failed, to "
        "resubmit): the id to resubmit once the scheduler answers again",
    )
    limit_bytes: int | None = Field(
        default=None, description="413: the most bytes the request's body may hold there (a setting of the server)"
    )
