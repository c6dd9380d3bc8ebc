"""An experiment's failures summarised: how many of its runs failed with each failure kind, at which of its grid's
coordinates, and each kind's sentence of what to do (server/services/failure_summary.py builds it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from contract.states import FailureKind


class FailurePoint(BaseModel):
    """The runs failed with one kind at one coordinate of the grid."""

    coordinate: dict[str, Any] = Field(description="the values of the grid's swept fields at this point")
    label: str = Field(description="the coordinate in words: 'fsdp, 8 GPUs'")
    runs: list[str] = Field(description="the failed runs' ids, in grid order")


class FailureGroup(BaseModel):
    """One failure kind among an experiment's runs."""

    kind: FailureKind
    count: int = Field(description="runs failed with this kind")
    advice: str = Field(description="what to do about it, in one sentence")
    points: list[FailurePoint] = Field(description="where in the grid, in grid order")
    summary: str = Field(description="in words: '2 of 24 out of memory: fsdp, 8 GPUs'")


class FailureSummary(BaseModel):
    experiment_id: str
    run_count: int = Field(description="the experiment's runs")
    failed: int = Field(description="runs that ended in failure (failed, out of memory, timeout, node failure)")
    unclassified: int = Field(
        description="failed runs whose kind is not known yet: their output is still being read to its end"
    )
    swept: list[str] = Field(description="the grid's swept fields, which a coordinate names")
    kinds: list[FailureGroup] = Field(description="by kind, the most frequent first")
