"""torch.compile, applied before the data-parallel wrappers so they see compiled units."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from worker.models.spec import ModelSpec


def compile_units(model: nn.Module, model_spec: ModelSpec) -> nn.Module:
    """Unit by unit where the model names units (FSDP keeps its hooks between them, and each compiles once);
    otherwise the whole model at once."""
    units = model_spec.compile_units(model) if model_spec.compile_units is not None else [model]
    for unit in units:
        unit.compile()
    return model
