"""The training courses' two-layer MLP."""

from __future__ import annotations

from torch import nn

HIDDEN = 256


def build(num_features: int, num_classes: int, hidden: int = HIDDEN) -> nn.Module:
    return nn.Sequential(
        nn.Linear(num_features, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )
