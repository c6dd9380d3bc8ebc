"""A small CIFAR-10 archive in the official Python format, for tests: no test downloads the real one."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from worker.datasets import cifar10


def write_cifar10(
    root: Path, per_batch: int = 20, test: int = 20, seed: int = 0
) -> dict[str, tuple[np.ndarray, list[int]]]:
    """Write `root/cifar-10-batches-py/` as the official archive extracts; return each file's images and labels."""
    folder = root / cifar10.FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    written = {}
    for name in (*cifar10.TRAIN_FILES, cifar10.VAL_FILE):
        n = test if name == cifar10.VAL_FILE else per_batch
        images = rng.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)
        labels = [int(label) for label in rng.integers(0, 10, size=n)]
        batch = {
            b"batch_label": name.encode(),
            b"labels": labels,
            b"data": images,
            b"filenames": [f"{name}_{i}.png".encode() for i in range(n)],
        }
        with (folder / name).open("wb") as f:
            pickle.dump(batch, f, protocol=2)  # an old protocol, as the Python 2 originals used
        written[name] = (images, labels)
    return written
