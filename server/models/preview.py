"""The preview of an experiment before it is submitted: the run specs its grid expands into, the memory each run
would need per GPU, and one run's batch script.

MemoryEstimate is the response schema of server.services.estimate, which computes it; it lives here so that the
preview's schema depends on no service.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from contract.spec import RunSpec
from server.models.experiment import SkippedRun


class MemoryEstimate(BaseModel):
    """Bytes one GPU holds at the peak of a training step (for pp: the stage that holds the most)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    parameter_count: int = Field(description="trainable parameters of the whole model")
    micro_batch: int = Field(description="samples in one forward pass on one GPU (pp: one pipeline microbatch)")
    parameters_bytes: int = Field(description="fp32 parameters this GPU holds (its shard or split)")
    gradients_bytes: int
    optimizer_state_bytes: int = Field(description="SGD momentum: one fp32 buffer per parameter held")
    activations_bytes: int = Field(description="what backward keeps, from an analytical count, not measured")
    buffers_bytes: int = Field(
        description="DDP gradient buckets, FSDP's gathered parameters, autocast's low-precision weight copies"
    )
    data_bytes: int = Field(description="the whole data set, which the worker keeps on every GPU")
    total_bytes: int
    pipeline_stage: int | None = Field(default=None, description="pp: the stage estimated, the one holding most")
    basis: str = Field(description="one line on how the figures were computed")


class RunEstimate(BaseModel):
    index: int = Field(description="the run's position in `runs`")
    estimate: MemoryEstimate | None = Field(description="memory per GPU; none when the worker would refuse the run")
    warning: str | None = Field(
        description="the estimate exceeds the partition's GPU memory, or why no estimate could be made"
    )


class ExperimentPreview(BaseModel):
    name: str
    runs: list[RunSpec] = Field(description="the run specs the grid expands into, in submission order")
    count: int
    skipped: list[SkippedRun] = Field(default=[], description="combinations left out (on_invalid: skip)")
    estimates: list[RunEstimate] = Field(
        default=[], description="memory per GPU of each run: parameters, gradients, optimizer state, activations"
    )
    index: int = Field(description="which run's batch script `script` is")
    script: str = Field(description="that run's batch script; RUN_ID stands for the id its run would get")
    array_script: str | None = Field(
        default=None,
        description="the Slurm job array's script that run goes in with the runs like it (one sbatch; each task "
        "starts its run's own batch script); RUN_ID_<n> stands for the id run n would get. None: it goes as a job "
        "of its own, `array_note` says why",
    )
    array_note: str | None = Field(default=None, description="why the run goes as a job of its own, not in an array")
