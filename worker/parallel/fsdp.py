"""FSDP2: parameters, gradients and optimizer state sharded; each unit gathers its weights only while it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from contract.spec import RunSpec

if TYPE_CHECKING:
    from worker.models.spec import ModelSpec


def apply_fsdp(model: nn.Module, mesh: DeviceMesh, spec: RunSpec, model_spec: ModelSpec) -> nn.Module:
    """Full shard over a 1-D mesh; hybrid (shard in a node, replicate across) over a 2-D one. The model's units are
    sharded one by one, so only one unit's full weights exist at a time; the root shards what they leave."""
    dp_mesh = mesh["dp"] if mesh.mesh_dim_names and "dp" in mesh.mesh_dim_names else mesh
    for unit in model_spec.fsdp_units(model):
        fully_shard(unit, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    return model
