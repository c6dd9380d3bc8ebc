"""The training courses' MLP: Linear/ReLU layers in one flat nn.Sequential.

Flat on purpose: pipeline parallelism cuts it into stages by slicing, and tensor parallelism pairs its hidden
Linear layers column-wise then row-wise.
"""

from __future__ import annotations

import math

from torch import nn

from contract.configs import MlpConfig
from contract.spec import RunSpec
from worker.datasets.bundle import DataBundle


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
