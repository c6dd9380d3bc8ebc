"""Parallel strategies: one `apply_*` per module, chosen once by name before training."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from worker.distributed import DistEnv
from worker.parallel.ddp import apply_ddp
from worker.parallel.single import apply_single
from worker.spec import RunSpec, Strategy

Apply = Callable[[nn.Module, DeviceMesh, RunSpec], nn.Module]

STRATEGIES: dict[Strategy, Apply] = {
    Strategy.single: apply_single,
    Strategy.ddp: apply_ddp,
}


class DegreeError(ValueError):
    """The spec's parallel layout does not fit the processes that were launched."""


def check_degrees(spec: RunSpec, dist_env: DistEnv) -> None:
    """Refuse a layout that does not match the launch, before any mesh or collective is built."""
    if spec.gpus != dist_env.world_size:
        raise DegreeError(
            f"the spec asks for {spec.gpus} processes but {dist_env.world_size} were launched: "
            "the batch script's task count must equal gpus"
        )
    if spec.strategy is Strategy.single and dist_env.world_size != 1:
        raise DegreeError(f"strategy 'single' needs one process, not {dist_env.world_size}")


def parallelize(model: nn.Module, spec: RunSpec, dist_env: DistEnv, device_type: str) -> nn.Module:
    check_degrees(spec, dist_env)
    try:
        apply = STRATEGIES[spec.strategy]
    except KeyError:
        raise DegreeError(f"unknown strategy {spec.strategy!r}; known: {', '.join(STRATEGIES)}") from None
    mesh = init_device_mesh(device_type, (dist_env.world_size,), mesh_dim_names=("dp",))
    return apply(model, mesh, spec)
