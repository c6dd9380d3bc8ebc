"""The parallel layout checked against the launch before any mesh exists, and the mesh built from it."""

from __future__ import annotations

from dataclasses import dataclass

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from contract.spec import FsdpSharding, RunSpec, Strategy


class DegreeError(ValueError):
    """The spec's parallel layout does not fit the processes that were launched."""


@dataclass(frozen=True)
class ParallelDims:
    dp: int
    tp: int
    pp: int
    world_size: int
    nodes: int

    @classmethod
    def from_spec(cls, spec: RunSpec, world_size: int, nodes: int) -> ParallelDims:
        return cls(dp=spec.dp_degree, tp=spec.tp, pp=spec.pp, world_size=world_size, nodes=nodes)

    def validate(self) -> None:
        if self.dp * self.tp * self.pp != self.world_size:
            raise DegreeError(
                f"the spec asks for {self.dp * self.tp * self.pp} processes "
                f"(data {self.dp} x tensor {self.tp} x pipeline {self.pp}) but {self.world_size} were launched: "
                "the batch script's task count must equal gpus"
            )
        if self.world_size % self.nodes:
            raise DegreeError(f"{self.world_size} processes do not spread evenly over {self.nodes} nodes")

    def mesh(self, device_type: str, spec: RunSpec) -> DeviceMesh:
        """One mesh for the whole run; strategies take the sub-meshes they need by name."""
        self.validate()
        if spec.strategy is Strategy.fsdp_tp:
            return init_device_mesh(device_type, (self.dp, self.tp), mesh_dim_names=("dp", "tp"))
        if spec.strategy is Strategy.fsdp and spec.fsdp_sharding is FsdpSharding.hybrid:
            per_node = self.world_size // self.nodes
            return init_device_mesh(device_type, (self.nodes, per_node), mesh_dim_names=("replicate", "shard"))
        names = {Strategy.tp: "tp", Strategy.pp: "pp"}
        return init_device_mesh(device_type, (self.world_size,), mesh_dim_names=(names.get(spec.strategy, "dp"),))
