"""A plan: the probes and 1-process runs an experiment request needs before its grid is run, and the answer made
from them (POST /api/plans, GET /api/plans/{id})."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import JSON, Column
from sqlmodel import Field as SQLField
from sqlmodel import SQLModel

from server.models.prediction import FabricFitPublic

Goal = Literal["fastest_epoch", "largest_n_at_efficiency"]
DEFAULT_EFFICIENCY = 0.8


class ExperimentPlan(SQLModel, table=True):
    """The experiment of a plan's probes and 1-process runs, and what it is a plan for: the request's grid."""

    __tablename__ = "experiment_plan"

    experiment_id: str = SQLField(foreign_key="experiment.id", primary_key=True, max_length=16)
    goal: str = SQLField(max_length=32)
    efficiency: float = SQLField(description="largest_n_at_efficiency: the least predicted efficiency")
    request: dict[str, Any] = SQLField(sa_column=Column(JSON, nullable=False), description="the request planned for")
    specs: list[dict[str, Any]] = SQLField(
        sa_column=Column(JSON, nullable=False), description="the grid's runs, as the request expanded when planned"
    )


class PlanPoint(BaseModel):
    """One point of the request's grid (its repeats together), predicted."""

    strategy: str
    gpus: int
    nodes: int
    spec: dict[str, Any] = Field(description="the point's run spec (its first repeat's)")
    repeats: int = Field(description="the grid's runs at this point")
    step_time_s: float | None = Field(description="predicted seconds per step; none: see unavailable")
    epoch_time_s: float | None
    # The step's parts as the step model adds them up (server.services.prediction.StepPrediction); none where the
    # point has no prediction.
    compute_s: float | None = Field(default=None, description="predicted compute seconds per step")
    comm_s: float | None = Field(
        default=None, description="predicted exposed communication seconds per step (after the measured overlap)"
    )
    bubble_s: float | None = Field(default=None, description="predicted pipeline bubble seconds per step")
    speedup: float | None = Field(description="predicted, against its series' smallest predicted point")
    efficiency: float | None = Field(description="predicted speed-up over the ratio of GPUs (weak: step ratio)")
    memory_per_gpu_bytes: int = Field(description="the preview's analytical estimate (server.services.estimate)")
    gpu_hours: float | None = Field(description="predicted epoch x epochs x GPUs x repeats, in hours")
    unavailable: str | None = Field(default=None, description="why no prediction")


class PlanRecommendation(BaseModel):
    strategy: str
    gpus: int
    nodes: int
    why: str = Field(description="in words: the goal and the figures that chose it")


class PlanPublic(BaseModel):
    id: str = Field(description="the plan's id, also its experiment's (the probes and 1-process runs)")
    name: str
    goal: Goal
    efficiency: float
    state: Literal["running", "ready", "failed"] = Field(
        description="running: some of its runs have not ended; failed: one it needs did not complete; ready: predicted"
    )
    waiting_for: list[str] = Field(default=[], description="running: the ids of its runs still to end")
    failed: list[str] = Field(default=[], description="failed: the ids of its runs that did not complete")
    probe_run_ids: list[str]
    reference_run_ids: dict[str, str] = Field(description="per strategy, its 1-process run's id")
    fits: list[FabricFitPublic] = Field(default=[], description="ready: the fabric fits used, per tier")
    points: list[PlanPoint] = Field(default=[], description="ready: every point of the request's grid")
    recommendation: PlanRecommendation | None = Field(
        default=None, description="ready: the strategy and GPU count for the goal; none where no point qualifies"
    )
    recommended_gpu_hours: float | None = Field(default=None, description="the recommended points' predicted cost")
    grid_gpu_hours: float | None = Field(default=None, description="the whole grid's predicted cost")
    gpu_hours_complete: bool = Field(
        default=True,
        description="false: some grid points have no prediction, so grid_gpu_hours counts only those that do "
        "(a lower bound)",
    )
