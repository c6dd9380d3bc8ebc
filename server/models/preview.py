"""The preview of an experiment before it is submitted: the run specs its grid expands into, the memory each run
would need per GPU, and one run's batch script."""

from __future__ import annotations

from pydantic import BaseModel, Field

from contract.spec import RunSpec
from server.models.experiment import SkippedRun
from server.services.estimate import MemoryEstimate


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
