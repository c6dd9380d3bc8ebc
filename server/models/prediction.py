"""The step model's answer: per series the predicted points beside the measured ones (GET .../prediction)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from server.models.compare import ScalingMode


class FabricFitPublic(BaseModel):
    """One tier's latency-bandwidth fit the prediction used (contract.fabric.AlphaBeta)."""

    tier: str = Field(description="intra_node or inter_node")
    alpha_s: float = Field(description="latency per collective, seconds")
    beta_bytes_per_s: float = Field(description="bus bandwidth large messages reach, bytes per second")


class ModelPoint(BaseModel):
    """One GPU count of a series: what the step model predicts, and what was measured there."""

    gpus: int
    nodes: int
    step_time_s: float | None = Field(description="predicted seconds per step; none: see unavailable")
    epoch_time_s: float | None = Field(description="predicted step x the layout's steps per epoch")
    speedup: float | None = Field(description="predicted, against the series' smallest predicted point")
    efficiency: float | None = Field(description="predicted speed-up over the ratio of GPUs (weak: step ratio)")
    compute_s: float | None = Field(description="the 1-process run's compute, data and optimizer, scaled")
    comm_s: float | None = Field(description="exposed communication: the collectives' time less measured overlap")
    bubble_s: float | None = Field(description="a pipeline stage's idle time, (p-1)/m of its compute")
    comm_total_s: float | None = Field(default=None, description="the collectives' time before overlap")
    overlap_fraction: float | None = Field(default=None, description="the share of communication taken as hidden")
    unavailable: str | None = Field(default=None, description="why no prediction: no fit, or a refused layout")
    measured_step_time_s: float | None = Field(default=None, description="the point's runs' median step, mean")
    residual: float | None = Field(
        default=None, description="(measured - predicted) / predicted: positive, slower than the model"
    )
    run_ids: list[str] = Field(default=[], description="the series' runs at this GPU count")


class ModelSeries(BaseModel):
    series: str
    strategy: str
    scaling: ScalingMode
    reference_run_id: str | None = Field(description="the finished 1-process run the compute is scaled from")
    basis: str = Field(description="in words: what the prediction is made of, or why there is none")
    points: list[ModelPoint]


class PredictionPublic(BaseModel):
    experiment_id: str | None = None
    tolerance: float = Field(description="off_model: a measured point this much slower than predicted is flagged")
    fits: list[FabricFitPublic] = Field(default=[], description="the fabric fits used, per tier")
    series: list[ModelSeries]
