"""Tensor parallelism: each weight matrix split over the group, column-wise then row-wise, so one all-reduce
per pair of layers brings the activations back together. Which layers, and how, is the model's plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import parallelize_module

from contract.spec import RunSpec
from worker.parallel.dims import DegreeError

if TYPE_CHECKING:
    from worker.models.spec import ModelSpec


def apply_tp(model: nn.Module, mesh: DeviceMesh, spec: RunSpec, model_spec: ModelSpec) -> nn.Module:
    if model_spec.tensor_parallel is None:
        raise DegreeError(f"model {model_spec.model} has no tensor-parallel plan")
    tp_mesh = mesh["tp"]
    return parallelize_module(model, tp_mesh, model_spec.tensor_parallel(model, tp_mesh.size()))
