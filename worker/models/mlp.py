"""The training courses' MLP: Linear/ReLU layers in one flat nn.Sequential.

Flat on purpose: pipeline parallelism cuts it into stages by slicing, and tensor parallelism pairs its hidden
Linear layers column-wise then row-wise.
"""

from __future__ import annotations

import math

from torch import nn

from contract.spec import RunSpec
from worker.datasets.bundle import DataBundle

DEPTH = 2  # hidden layers
WIDTH = 256


def build(spec: RunSpec, bundle: DataBundle) -> nn.Sequential:
    if bundle.task != "classification":
        raise ValueError(f"mlp classifies, but data set '{spec.dataset}' is for {bundle.task}")
    depth, width = spec.depth or DEPTH, spec.width or WIDTH
    layers: list[nn.Module] = [nn.Flatten(), nn.Linear(math.prod(bundle.sample_shape), width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, bundle.num_classes))
    return nn.Sequential(*layers)
