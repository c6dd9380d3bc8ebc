"""The training courses' MLP: Linear/ReLU layers in one flat nn.Sequential, and its spec.

Flat on purpose: pipeline parallelism cuts it into stages by slicing, and tensor parallelism pairs its hidden
Linear layers column-wise then row-wise.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from torch import nn

from contract.configs import MlpConfig, paired_splits, why_width_does_not_split
from contract.spec import Model, RunSpec
from worker.datasets.bundle import DataBundle
from worker.models import sequential
from worker.parallel.dims import DegreeError

if TYPE_CHECKING:
    from torch.distributed.tensor.parallel import ParallelStyle


def build(spec: RunSpec, bundle: DataBundle) -> nn.Sequential:
    if bundle.task != "classification":
        raise ValueError(f"mlp classifies, but data set '{spec.dataset}' is for {bundle.task}")
    config = MlpConfig.of(spec)
    width = config.width
    layers: list[nn.Module] = [nn.Flatten(), nn.Linear(math.prod(bundle.sample_shape), width), nn.ReLU()]
    for _ in range(config.depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, bundle.num_classes))
    return nn.Sequential(*layers)


def tensor_plan(model: nn.Module, tp: int) -> dict[str, ParallelStyle]:
    """The Linear layers in column/row pairs (contract.configs.paired_splits); an unpaired last one stays whole."""
    # Imported on use, as worker.parallel imports its strategies (DTensor costs every rank's start seconds).
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    linears = [(name, layer) for name, layer in model.named_children() if isinstance(layer, nn.Linear)]
    plan: dict[str, ParallelStyle] = {}
    for (name, layer), split in zip(linears, paired_splits(len(linears)), strict=True):
        if split == "column" and (why := why_width_does_not_split(layer.out_features, tp)):
            raise DegreeError(why)
        if split is not None:
            plan[name] = ColwiseParallel() if split == "column" else RowwiseParallel()
    return plan


SPEC = sequential.flat_spec(Model.mlp, MlpConfig, build, tensor_plan)
