"""FSDP2: parameters, gradients and optimizer state sharded; each block gathers its weights only while it runs."""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from contract.spec import RunSpec


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The blocks sharded one by one, so only one block's full weights exist at a time."""
    blocks = getattr(model, "blocks", None)  # gpt
    if isinstance(blocks, nn.ModuleDict):
        return list(blocks.values())
    layers = [getattr(model, f"layer{i}", None) for i in range(1, 5)]  # resnet
    return [layer for layer in layers if layer is not None]


def apply_fsdp(model: nn.Module, mesh: DeviceMesh, spec: RunSpec) -> nn.Module:
    """Full shard over a 1-D mesh; hybrid (shard in a node, replicate across) over a 2-D one."""
    dp_mesh = mesh["dp"] if mesh.mesh_dim_names and "dp" in mesh.mesh_dim_names else mesh
    for unit in shard_units(model):
        fully_shard(unit, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    return model
