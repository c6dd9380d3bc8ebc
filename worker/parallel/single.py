"""One process, no wrapping: the baseline every speed-up is measured against."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from contract.spec import RunSpec

if TYPE_CHECKING:
    from worker.models.spec import ModelSpec


def apply_single(model: nn.Module, mesh: DeviceMesh, spec: RunSpec, model_spec: ModelSpec) -> nn.Module:
    return model
