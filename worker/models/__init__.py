"""The models, one file each, and the registry of their specs (worker/models/spec.py) keyed by the spec's name.

Each model reads its hyperparameters from contract.configs (`XConfig.of(spec)`), where the server's memory estimate
reads them too; what only the worker needs (weight initialisation, the names of its layers, its parallel plans)
stays in the model's file.

Every builder draws its initial weights from torch's global generator, so processes that seed it alike before
building get identical models.
"""

from __future__ import annotations

from torch import nn

from contract.spec import Model, RunSpec
from worker.datasets.bundle import DataBundle
from worker.models import cnn, gpt, mlp, resnet18
from worker.models.spec import ModelSpec

SPECS: dict[Model, ModelSpec] = {spec.model: spec for spec in (mlp.SPEC, cnn.SPEC, resnet18.SPEC, gpt.SPEC)}


def model_spec(model: Model) -> ModelSpec:
    """The model's spec; a clear error for a name no model has."""
    try:
        return SPECS[model]
    except KeyError:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(SPECS)}") from None


def build(spec: RunSpec, bundle: DataBundle) -> nn.Module:
    return model_spec(spec.model).build(spec, bundle)
