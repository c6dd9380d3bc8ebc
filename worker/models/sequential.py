"""What a flat nn.Sequential (mlp, cnn) gives the strategies: stages cut by slicing, and its weighted layers."""

from __future__ import annotations

from torch import nn

from contract.configs import ModelConfig
from contract.spec import Model
from contract.splits import even_groups
from worker.models.spec import Build, ModelSpec, TensorPlan
from worker.parallel.dims import DegreeError


def _layers(model: nn.Module) -> nn.Sequential:
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"expected a flat nn.Sequential, got {type(model).__name__}")
    return model


def weighted(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def cut_stage(model: nn.Module, stage: int, stages: int, name: str) -> nn.Module:
    """Cut before layers with weights, so each stage gets an equal share of them."""
    layers = _layers(model)
    cuts = [i for i, layer in enumerate(layers) if weighted(layer)]
    if len(cuts) < stages:
        raise DegreeError(f"{name} has {len(cuts)} layers with weights: too few for {stages} pipeline stages")
    groups = even_groups(len(cuts), stages)
    start = 0 if stage == 0 else cuts[groups[stage].start]
    end = len(layers) if stage == stages - 1 else cuts[groups[stage + 1].start]
    return layers[start:end]


def checkpoint_units(model: nn.Module) -> list[nn.Module]:
    """Each layer with weights, batch norms left out: recomputing one saves nothing (it keeps its input either way),
    and the memory estimate (server/services/estimate.py) counts the same units."""
    return [
        layer for layer in _layers(model) if weighted(layer) and not isinstance(layer, nn.modules.batchnorm._BatchNorm)
    ]


def flat_spec(model: Model, config: type[ModelConfig], build: Build, tensor_parallel: TensorPlan | None) -> ModelSpec:
    """The spec of a flat sequential model: cut into stages by slicing, each weighted layer checkpointed, sharded by
    FSDP as one unit (its layers are small)."""

    def pipeline_stage(layers: nn.Module, stage: int, stages: int) -> nn.Module:
        return cut_stage(layers, stage, stages, model.value)

    return ModelSpec(
        model=model,
        config=config,
        build=build,
        tensor_parallel=tensor_parallel,
        pipeline_stage=pipeline_stage,
        checkpoint_units=checkpoint_units,
    )
