"""Data sets held as tensors, and each rank's shard of them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from worker.spec import Dataset, RunSpec


@dataclass(frozen=True)
class Split:
    inputs: torch.Tensor
    targets: torch.Tensor

    def __len__(self) -> int:
        return len(self.targets)


@dataclass(frozen=True)
class DataBundle:
    train: Split
    val: Split
    num_features: int
    num_classes: int


SYNTHETIC_FEATURES = 32
SYNTHETIC_CLASSES = 10
SYNTHETIC_TRAIN = 8192
SYNTHETIC_VAL = 2048


def synthetic(seed: int) -> DataBundle:
    """Gaussian clusters around seeded class centres: learnable, yet not separable to 100%."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(SYNTHETIC_CLASSES, SYNTHETIC_FEATURES, generator=gen) * 1.5

    def draw(n: int) -> Split:
        targets = torch.randint(SYNTHETIC_CLASSES, (n,), generator=gen)
        inputs = centres[targets] + torch.randn(n, SYNTHETIC_FEATURES, generator=gen) * 2.0
        return Split(inputs, targets)

    return DataBundle(draw(SYNTHETIC_TRAIN), draw(SYNTHETIC_VAL), SYNTHETIC_FEATURES, SYNTHETIC_CLASSES)


def load(spec: RunSpec) -> DataBundle:
    # Every rank builds the same tensors from the seed; each then reads only its shard.
    loaders = {Dataset.synthetic: synthetic}
    return loaders[spec.dataset](spec.seed)


def train_shard(size: int, rank: int, world_size: int, seed: int, epoch: int, per_rank_batch: int) -> torch.Tensor:
    """This rank's sample indices for one epoch: reshuffled each epoch, equal whole batches on every rank.

    Equal batch counts matter: a rank with one more step would wait forever in the gradient all-reduce.
    """
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    steps = size // (world_size * per_rank_batch)
    return order[rank : steps * world_size * per_rank_batch : world_size]


def val_shard(size: int, rank: int, world_size: int) -> torch.Tensor:
    """Every validation sample exactly once over all ranks."""
    return torch.arange(rank, size, world_size)
