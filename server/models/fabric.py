"""The fabric's stored measurements: one row per probed tier of a run (a probe run's, or a training run's
pre-flight), keyed by the shape it measured, with the per-size points its curve is drawn from and the tier's fit;
and what `GET /api/fabric` and a probe experiment's `GET /api/experiments/{id}/fabric` answer."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field as SQLField
from sqlmodel import SQLModel

from contract.fabric import Collective, Tier
from contract.states import FailureKind, RunState
from server.models.common import new_id, utcnow

# The longest flag sentence kept.
FABRIC_FLAG_CHARS = 1000


class FabricProbe(SQLModel, table=True):
    """One tier of one run's probe: the shape (profile, partition, nodes, processes per node, backend, tier), the
    points measured (collective, ranks, nbytes, seconds each, as the records said: the bandwidths are computed again
    from them by contract.fabric when read) and the tier's latency and bandwidth, fitted by the server from those
    points."""

    __table_args__ = (
        UniqueConstraint("run_id", "tier", "preflight"),
        Index("ix_fabricprobe_shape", "profile", "partition", "backend", "tier"),
    )

    id: str = SQLField(default_factory=new_id, primary_key=True, max_length=16)
    run_id: str = SQLField(foreign_key="run.id", index=True, max_length=16)
    profile: str = SQLField(max_length=64)
    partition: str = SQLField(max_length=64)
    nodes: int
    processes_per_node: int
    backend: str = SQLField(max_length=16)
    tier: str = SQLField(max_length=16, description="a contract.fabric.Tier, kept as text")
    ranks: int = SQLField(description="the ranks of the tier's collectives (point-to-point: two)")
    preflight: bool = SQLField(default=False)
    alpha_s: float
    beta_bytes_per_s: float
    points: list[dict[str, Any]] = SQLField(default_factory=list, sa_column=Column(JSON, nullable=False))
    measured_at: datetime = SQLField(default_factory=utcnow)
    # A pre-flight below what its fabric is expected to give: the fabric_degraded flag's sentence, judged when it
    # was stored against the reference then in force (server/services/flags.py); none: not below, or no reference.
    degraded: str | None = SQLField(default=None, max_length=FABRIC_FLAG_CHARS)
    # The band a pre-flight was judged against (server/services/flags.py: FabricExpected, as JSON: basis,
    # low_bytes_per_s, high_bytes_per_s, source), kept so that a scaling card can carry it and its verdict be drawn
    # again from the card alone; none: nothing was expected (or judged before bands were kept).
    expected: dict[str, Any] | None = SQLField(default=None, sa_column=Column(JSON, nullable=True))


class FabricPoint(BaseModel):
    collective: Collective
    ranks: int
    nbytes: int = Field(description="the buffer's bytes as nccl-tests counts them")
    seconds: float = Field(description="median time of one collective, the slowest rank's")
    algbw_bytes_per_s: float = Field(description="nbytes / seconds")
    busbw_bytes_per_s: float = Field(description="algbw x nccl-tests' factor for the collective and its ranks")


class FabricShape(BaseModel):
    profile: str
    partition: str
    nodes: int
    processes_per_node: int
    backend: str
    tier: Tier


class FabricEntry(BaseModel):
    """One tier of one probe: where it was measured, its curve and its fit."""

    shape: FabricShape
    preflight: bool = Field(description="a training run's pre-flight (a few all-reduces), not a probe run")
    ranks: int
    points: list[FabricPoint]
    alpha_s: float = Field(description="latency: seconds per collective, fitted over the points")
    beta_bytes_per_s: float = Field(description="bus bandwidth the largest messages reach, fitted over the points")
    fit_error: float = Field(
        description="how well alpha and beta explain the points: the root mean square of each point's relative "
        "error (0.1: the fit's times are typically 10 % off the measured ones)"
    )
    run_id: str = Field(description="the run it came from")
    measured_at: datetime
    degraded: str | None = Field(
        default=None, description="a pre-flight below what its fabric is expected to give: why (fabric_degraded)"
    )


class FabricPublic(BaseModel):
    data: list[FabricEntry]
    count: int


class ProbeRunFabric(BaseModel):
    """One run of a probe experiment: the shape it probes, how it stands, and what it measured once its output has
    been read (a tier it could not fit is absent)."""

    run_id: str
    state: RunState
    profile: str
    partition: str
    nodes: int
    processes_per_node: int
    backend: str | None = Field(description="the backend its probe measured with; none until it has measured")
    failure_kind: FailureKind | None = Field(description="why it did not complete, as a kind with a remedy")
    failure_detail: str | None = Field(description="the evidence for its failure kind and what to do")
    message: str | None = Field(description="what went wrong, for the user (a run that could not be submitted)")
    ingest_done: bool = Field(description="the run has ended and all its output has been read: its figures are final")
    tiers: list[FabricEntry] = Field(description="each tier it measured: its curve, fit and the fit's error")


class ExperimentFabricPublic(BaseModel):
    experiment_id: str
    data: list[ProbeRunFabric]
    count: int
