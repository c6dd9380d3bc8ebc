"""The comparison of runs: one row of figures per run (speed-up, efficiency, losses, memory), and each run's
epochs for the curves. No table of its own: server.services.comparison computes it from runs and metrics."""

from __future__ import annotations

from pydantic import BaseModel, Field

from contract.spec import Strategy
from contract.states import RunState


class CompareRow(BaseModel):
    run_id: str
    state: RunState
    strategy: Strategy
    gpus: int
    nodes: int
    global_batch_size: int
    epochs_done: int
    mean_epoch_time_s: float | None
    speedup: float | None = Field(description="against the timed run of the same series with the fewest GPUs")
    efficiency: float | None = Field(description="speed-up divided by the ratio of GPUs")
    final_train_loss: float | None
    final_val_loss: float | None
    final_val_accuracy: float | None
    samples_per_s: float | None
    peak_memory_bytes: int | None
    # Last, so that the CSV's first columns stay those that scripts of earlier versions read.
    experiment_id: str
    series: str = Field(
        description="the run's scaling series: its strategy and whatever else tells it apart from the other series"
    )
    ingest_done: bool = Field(description="the run has ended and all its output has been read: its figures are final")


class EpochPoint(BaseModel):
    """One epoch of a run's history, as its last print of that epoch gave it."""

    epoch: int
    train_loss: float
    val_loss: float | None = None  # course logs may print none
    val_accuracy: float | None = None
    epoch_time_s: float


class ComparePublic(BaseModel):
    experiment_id: str | None = Field(default=None, description="the experiment compared, if one was asked for alone")
    data: list[CompareRow]
    count: int
    histories: dict[str, list[EpochPoint]] | None = Field(
        default=None, description="run id -> its epochs in order, when asked for with history=true"
    )
