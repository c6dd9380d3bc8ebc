"""What each model gives the parallel strategies: its builder, and its plans where it supports them.

The strategies (worker/parallel/) apply what a model's spec gives them and never name a model's layers: the names
live beside the model that has them. The spec's `config` is the model's torch-free description in contract.configs,
which the server's estimate reads too: figures both sides need per model belong there, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import nn

from contract.configs import ModelConfig
from contract.spec import Model, RunSpec
from worker.datasets.bundle import DataBundle

if TYPE_CHECKING:
    from torch.distributed.tensor.parallel import ParallelStyle

Build = Callable[[RunSpec, DataBundle], nn.Module]
# (the whole model, the tensor-parallel degree) -> a style per module path; raises DegreeError where it cannot split.
TensorPlan = Callable[[nn.Module, int], "dict[str, ParallelStyle]"]
# The model -> some of its modules, in forward order.
Units = Callable[[nn.Module], list[nn.Module]]
# (the whole model, this stage, the stages) -> the stage's part; raises DegreeError where there are too few layers.
StageCut = Callable[[nn.Module, int, int], nn.Module]


def no_units(model: nn.Module) -> list[nn.Module]:
    return []


@dataclass(frozen=True)
class ModelSpec:
    """One model; None where it does not support the strategy."""

    model: Model
    config: type[ModelConfig]
    build: Build
    # Tensor parallelism: the modules it splits, by columns or rows (ColwiseParallel, RowwiseParallel).
    tensor_parallel: TensorPlan | None = None
    # FSDP: the modules sharded one by one, so that only one of them is gathered at a time; the root shards the rest.
    fsdp_units: Units = no_units
    # Pipeline parallelism: the part of the model one stage keeps.
    pipeline_stage: StageCut | None = None
    # Activation checkpointing: the modules that keep only their input and recompute the rest in backward.
    checkpoint_units: Units | None = None
    # torch.compile: the modules compiled one by one (FSDP keeps its hooks between them); None compiles it whole.
    compile_units: Units | None = None
