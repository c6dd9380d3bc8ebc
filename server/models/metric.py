"""What a run printed: every metric record (the history), and the latest figures kept beside it (the summary),
as MLflow keeps `metrics` and `latest_metrics`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import JSON, Column, UniqueConstraint
from sqlmodel import Field as SQLField
from sqlmodel import SQLModel

from contract.records import MetricRecord
from server.models.common import BIG_INTEGER


class Metric(SQLModel, table=True):
    """Every record a run printed (the history)."""

    # The unique key's index also serves every query by run (it starts with run_id): no index of run_id alone.
    __table_args__ = (UniqueConstraint("run_id", "offset"),)

    id: int | None = SQLField(default=None, primary_key=True, sa_type=BIG_INTEGER)
    run_id: str = SQLField(foreign_key="run.id")
    # The byte offset of the line in the output file: unique per run, so a record can never be stored twice.
    offset: int = SQLField(sa_type=BIG_INTEGER)
    kind: str
    epoch: int | None = None
    record: dict[str, Any] = SQLField(sa_column=Column(JSON, nullable=False))
    # Ingestion's verdict, kept as each record is stored, so that readers filter instead of replaying the history:
    # False once a later print of the same figure (epoch, rank's memory, inference figures) replaced the record, or
    # a new start of the worker dropped it and no resume brought it back. Kinds the rule does not cover always count.
    counts: bool = True


class MetricsPublic(BaseModel):
    data: list[MetricRecord] = Field(
        description="the records in output order; asked for with history=true, each also carries `superseded`: "
        "true where a later record replaced it (it no longer counts)"
    )
    count: int = Field(description="the records that match, over all pages")


class RunSummary(SQLModel, table=True):
    """The latest figures of a run, kept current by ingestion (the summary beside the history)."""

    run_id: str = SQLField(foreign_key="run.id", primary_key=True)
    world_size: int | None = None
    device: str | None = None
    epochs_done: int = 0
    first_epoch_time_s: float | None = None
    epoch_time_sum_s: float = 0.0
    last_train_loss: float | None = None
    last_val_loss: float | None = None
    last_val_accuracy: float | None = None
    last_samples_per_s: float | None = None
    peak_memory_bytes: int | None = SQLField(default=None, sa_type=BIG_INTEGER)
    # What peak_memory_bytes measures (contract.records.MEMORY_MEASURES), and the resident set beside it.
    peak_memory_kind: str | None = None
    peak_rss_bytes: int | None = SQLField(default=None, sa_type=BIG_INTEGER)
    total_time_s: float | None = None
    end_status: str | None = None

    @property
    def mean_epoch_time_s(self) -> float | None:
        """Mean over epochs after the first, which pays for warm-up; the first alone if it is the only one."""
        if self.epochs_done == 0 or self.first_epoch_time_s is None:
            return None
        if self.epochs_done == 1:
            return self.first_epoch_time_s
        return (self.epoch_time_sum_s - self.first_epoch_time_s) / (self.epochs_done - 1)
