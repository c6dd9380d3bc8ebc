"""Data sets held as tensors, and each rank's shard of them."""

from __future__ import annotations

from collections.abc import Callable

import torch

from contract.spec import Dataset, RunSpec
from worker.datasets import cifar10, digits, synthetic, text
from worker.datasets.bundle import DataBundle, Split, Task

__all__ = ["LOADERS", "DataBundle", "Split", "Task", "load", "train_shard", "val_shard"]

LOADERS: dict[Dataset, Callable[[RunSpec, int], DataBundle]] = {
    Dataset.synthetic: synthetic.load,
    Dataset.digits: digits.load,
    Dataset.cifar10: cifar10.load,
    Dataset.text: text.load,
}


def load(spec: RunSpec, rank: int) -> DataBundle:
    """The spec's data set, built alike on every rank (each then reads only its shard).

    Only rank 0 may download: the caller lets it finish loading before the other ranks start.
    """
    try:
        loader = LOADERS[spec.dataset]
    except KeyError:
        raise ValueError(f"unknown data set {spec.dataset!r}; known: {', '.join(LOADERS)}") from None
    return loader(spec, rank)


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
