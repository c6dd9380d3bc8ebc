"""What POST /api/experiments/{id}/rerun asks for: which of an experiment's failed runs to run again, and what to
change in each (server/services/submission.py's rerun_failed does it); and its preview's answer."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from contract.states import FailureKind, RunState
from server.models.experiment import MAX_RUNS_PER_EXPERIMENT

RunId = Annotated[str, StringConstraints(min_length=1, max_length=16)]
SpecField = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class FailedRerun(BaseModel):
    """Which failed runs of the experiment run again, each as a new run linked to its original, with `set` changed."""

    model_config = ConfigDict(extra="forbid")

    failed: Literal[True] = Field(
        default=True,
        description="the runs that ended without completing and were not stopped by hand: failed, out_of_memory, "
        "timeout and node_fail (submit_failed, cancelled and preempted runs never failed at running: resubmit them)",
    )
    kinds: list[FailureKind] = Field(
        default=[], max_length=len(FailureKind), description="only runs that failed with one of these kinds"
    )
    run_ids: list[RunId] = Field(
        default=[],
        max_length=MAX_RUNS_PER_EXPERIMENT,
        description="only these runs (a run already rerun is rerun again only when named here)",
    )
    set: dict[SpecField, Any] = Field(
        default={},
        max_length=64,
        description='spec fields to change in every rerun, e.g. {"activation_checkpointing": true}; null resets '
        "one to its default. Each changed spec is validated as a run's, and against the experiment's profile",
    )


class RerunPreviewed(BaseModel):
    """One failed run that would run again, and its rerun's spec."""

    rerun_of: str = Field(description="the failed run")
    state: RunState = Field(description="how it ended")
    failure_kind: FailureKind | None = Field(description="why, where the run was classified")
    spec: dict[str, Any] = Field(description="the rerun's spec")
    changed: dict[str, Any] = Field(
        description="the rerun's spec fields that differ from the original's, with their new values (a field reset "
        "shows its default; a learning-rate rule's rate follows a changed batch)"
    )


class RerunPreview(BaseModel):
    data: list[RerunPreviewed]
    count: int
