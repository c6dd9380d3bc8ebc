"""Model builders, one file each; `build` picks one by the spec's name."""

from __future__ import annotations

from torch import nn

from worker.models import mlp
from worker.spec import Model


def build(name: Model, num_features: int, num_classes: int) -> nn.Module:
    builders = {Model.mlp: mlp.build}
    return builders[name](num_features, num_classes)
