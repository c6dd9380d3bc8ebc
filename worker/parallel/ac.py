"""Activation checkpointing: keep only each unit's input in forward, recompute its activations in backward."""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.utils.checkpoint import checkpoint


class Checkpointed(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any) -> Any:
        return checkpoint(self.inner, *args, use_reentrant=False)


def _weighted(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def apply_ac(model: nn.Module) -> nn.Module:
    """Checkpoint gpt's blocks, resnet's stages, or each weighted layer of a sequential model."""
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.ModuleDict):
        for key in list(blocks.keys()):
            blocks[key] = Checkpointed(blocks[key])
    elif isinstance(model, nn.Sequential):
        for index, layer in enumerate(model):
            # Batch norm recomputed in backward would update its running statistics twice.
            if _weighted(layer) and not isinstance(layer, nn.modules.batchnorm._BatchNorm):
                model[index] = Checkpointed(layer)
    else:
        for name in ("layer1", "layer2", "layer3", "layer4"):
            if isinstance(getattr(model, name, None), nn.Module):
                setattr(model, name, Checkpointed(getattr(model, name)))
    return model
