"""torch.compile, applied before the data-parallel wrappers so they see compiled blocks."""

from __future__ import annotations

from torch import nn


def compile_units(model: nn.Module) -> nn.Module:
    """Block by block where the model has blocks: FSDP keeps its hooks between them, and each compiles once."""
    blocks = getattr(model, "blocks", None)
    units = list(blocks.values()) if isinstance(blocks, nn.ModuleDict) else [model]
    for unit in units:
        unit.compile()
    return model
