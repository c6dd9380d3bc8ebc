"""Model builders, one file each; `build` picks one by the spec's name.

Each builder reads its model's hyperparameters from contract.configs (`XConfig.of(spec)`), where the server's
memory estimate reads them too; what only the worker needs (weight initialisation) stays in the model's file.

Every builder draws its initial weights from torch's global generator, so processes that seed it alike before
building get identical models.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from contract.spec import Model, RunSpec
from worker.datasets.bundle import DataBundle
from worker.models import cnn, gpt, mlp, resnet18

BUILDERS: dict[Model, Callable[[RunSpec, DataBundle], nn.Module]] = {
    Model.mlp: mlp.build,
    Model.cnn: cnn.build,
    Model.resnet18: resnet18.build,
    Model.gpt: gpt.build,
}


def build(spec: RunSpec, bundle: DataBundle) -> nn.Module:
    try:
        builder = BUILDERS[spec.model]
    except KeyError:
        raise ValueError(f"unknown model {spec.model!r}; known: {', '.join(BUILDERS)}") from None
    return builder(spec, bundle)
