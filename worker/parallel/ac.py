"""Activation checkpointing: keep only each unit's input in forward, recompute its activations in backward.

A unit is checkpointed in place, by replacing its forward, not by wrapping it in another module: a wrapper would
add its own name to every parameter's (`blocks.0.inner.attn...`), so that a checkpoint saved with checkpointing on
could not be loaded with it off, nor by inference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

if TYPE_CHECKING:
    from worker.models.spec import ModelSpec

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


def apply_ac(model: nn.Module, model_spec: ModelSpec) -> nn.Module:
    """Checkpoint the units the model's spec names."""
    if model_spec.checkpoint_units is None:
        raise ValueError(f"model {model_spec.model} names no units to checkpoint")
    for unit in model_spec.checkpoint_units(model):
        _checkpoint(unit)
    return model
