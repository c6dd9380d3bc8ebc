"""One process, no wrapping: the baseline every speed-up is measured against."""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from contract.spec import RunSpec


def apply_single(model: nn.Module, mesh: DeviceMesh, spec: RunSpec) -> nn.Module:
    return model
