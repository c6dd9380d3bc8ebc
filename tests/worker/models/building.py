"""Building a model the way the worker does, for the model tests."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tests.factories import spec
from worker import data, models


def build(model: str, dataset: str, bundle: data.DataBundle, seed: int = 0, **fields) -> Any:
    """The model, typed loosely: tests reach into each model's own attributes."""
    torch.manual_seed(seed)
    return models.build(spec(model=model, dataset=dataset, **fields), bundle)


def count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
