"""Data parallel: a full replica per process, gradients all-reduced in buckets during backward."""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.nn.parallel import DistributedDataParallel

from worker.spec import RunSpec


def apply_ddp(model: nn.Module, mesh: DeviceMesh, spec: RunSpec) -> nn.Module:
    return DistributedDataParallel(model, device_mesh=mesh)
