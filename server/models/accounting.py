"""What Slurm's accounting says an ended run used, and which other jobs shared its nodes: one row per run, written
once by the accounting service after the run ended."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field
from sqlalchemy import JSON, Column
from sqlmodel import Field as SQLField
from sqlmodel import SQLModel

from server.models.common import BIG_INTEGER, utcnow

# The figures a cluster may not gather (no step sampled, no GPU or energy plugin), as `not_gathered` names them.
GATHERABLE = ("max_rss_bytes", "gpu_util", "gpu_mem_bytes", "energy_j")


class RunAccountingBase(SQLModel):
    job_id: str = SQLField(description="the job accounted for (a resubmitted run is accounted for again)")
    nodes: str | None = SQLField(default=None, description="the nodes the job ran on, as Slurm writes them")
    start: datetime | None = SQLField(default=None, description="when the job started, by Slurm")
    end: datetime | None = SQLField(default=None, description="when the job ended, by Slurm")
    elapsed_s: int | None = SQLField(default=None, description="Slurm's elapsed time of the job")
    alloc_cpus: int | None = SQLField(default=None, description="CPUs allocated to the job")
    total_cpu_s: float | None = SQLField(default=None, description="CPU time the job's processes used (TotalCPU)")
    cpu_efficiency: float | None = SQLField(
        default=None, description="total_cpu_s / (elapsed_s x alloc_cpus); none when the job ran no time"
    )
    max_rss_bytes: int | None = SQLField(
        default=None, sa_type=BIG_INTEGER, description="the largest resident memory of any step"
    )
    gpu_util: float | None = SQLField(
        default=None, description="GPU utilisation in percent (the largest step's gres/gpuutil)"
    )
    gpu_mem_bytes: int | None = SQLField(
        default=None, sa_type=BIG_INTEGER, description="GPU memory used (the largest step's gres/gpumem)"
    )
    energy_j: int | None = SQLField(default=None, sa_type=BIG_INTEGER, description="energy the job consumed, in joules")
    shared_with: list[str] = SQLField(
        default_factory=list,
        sa_column=Column(JSON, nullable=False),
        description="ids of the other jobs that ran on one of its nodes while it ran",
    )
    not_gathered: list[str] = SQLField(
        default_factory=list,
        sa_column=Column(JSON, nullable=False),
        description=f"the figures this cluster did not gather for the job, of {', '.join(GATHERABLE)}",
    )
    message: str | None = SQLField(default=None, description="why there are no figures, when there are none")
    accounted_at: datetime = SQLField(default_factory=utcnow)


class RunAccounting(RunAccountingBase, table=True):
    run_id: str = SQLField(foreign_key="run.id", primary_key=True, max_length=16)


class AccountingPublic(RunAccountingBase):
    run_id: str
    shared_node: bool = Field(description="other jobs ran on the run's nodes while it ran: its timings may suffer")

    @classmethod
    def of(cls, row: RunAccounting) -> AccountingPublic:
        return cls.model_validate({**row.model_dump(), "shared_node": bool(row.shared_with)})
