"""A small CIFAR-10 archive in the official Python format, for tests: no test downloads the real one."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benches.cifar_archive import write_batches
from worker.datasets import cifar10


def write_cifar10(
    root: Path, per_batch: int = 20, test: int = 20, seed: int = 0
) -> dict[str, tuple[np.ndarray, list[int]]]:
    """Random images in `root/cifar-10-batches-py/`; returns each file's images and labels to check against."""
    rng = np.random.default_rng(seed)
    written = {}
    for name in (*cifar10.TRAIN_FILES, cifar10.VAL_FILE):
        n = test if name == cifar10.VAL_FILE else per_batch
        images = rng.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)
        written[name] = (images, [int(label) for label in rng.integers(0, 10, size=n)])
    write_batches(root, written)
    return written
