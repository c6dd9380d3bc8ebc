"""Activation checkpointing: keep only each unit's input in forward, recompute its activations in backward.

A unit is checkpointed in place, by replacing its forward, not by wrapping it in another module: a wrapper would
add its own name to every parameter's (`blocks.0.inner.attn...`), so that a checkpoint saved with checkpointing on
could not be loaded with it off, nor by inference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

# Set on a unit whose forward recomputes in backward.
_MARK = "_scalelab_checkpointed"


def is_checkpointed(module: nn.Module) -> bool:
    return bool(getattr(module, _MARK, False))


@contextlib.contextmanager
def _statistics_kept(unit: nn.Module) -> Iterator[None]:
    """Recomputing a unit in backward runs its batch norms' forward a second time, which would update their running
    statistics twice per step: the recomputation puts them back as the first forward left them."""
    norms = [m for m in unit.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training]
    kept = [(buffer, buffer.clone()) for norm in norms for buffer in norm.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, before in kept:
                buffer.copy_(before)


def _checkpoint(unit: nn.Module) -> None:
    forward: Callable[..., Any] = unit.forward

    def recomputed_in_backward(*args: Any) -> Any:
        return checkpoint(
            forward,
            *args,
            use_reentrant=False,
            context_fn=lambda: (contextlib.nullcontext(), _statistics_kept(unit)),
        )

    unit.forward = recomputed_in_backward
    setattr(unit, _MARK, True)


def _weighted(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def apply_ac(model: nn.Module) -> nn.Module:
    """Checkpoint gpt's blocks, resnet's stages, or each weighted layer of a sequential model."""
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.ModuleDict):
        for block in blocks.values():
            _checkpoint(block)
    elif isinstance(model, nn.Sequential):
        for layer in model:
            # Batch norms stay outside: recomputing one saves nothing (it keeps its input either way), and the
            # memory estimate (server/services/estimate.py) counts the same units.
            if _weighted(layer) and not isinstance(layer, nn.modules.batchnorm._BatchNorm):
                _checkpoint(layer)
    else:
        for name in ("layer1", "layer2", "layer3", "layer4"):
            stage = getattr(model, name, None)
            if isinstance(stage, nn.Module):
                _checkpoint(stage)
    return model
