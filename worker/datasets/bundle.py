"""What every data set loads into; `worker.data` re-exports these for the training loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

Task = Literal["classification", "language"]


@dataclass(frozen=True)
class Split:
    """Classification: float inputs (N, *sample_shape), long targets (N,).
    Language: long inputs (N, context), long targets (N, context), the inputs shifted by one token."""

    inputs: torch.Tensor
    targets: torch.Tensor

    def __len__(self) -> int:
        return len(self.targets)


@dataclass(frozen=True)
class DataBundle:
    train: Split
    val: Split
    num_classes: int  # classes, or the vocabulary size for language modelling
    sample_shape: tuple[int, ...]  # of one input sample
    task: Task
    # Applied by the training loop to a whole batch of training inputs, already on the device.
    augment: Callable[[torch.Tensor], torch.Tensor] | None = None
