"""CIFAR-10 from its official Python format in a directory; downloaded there only on request, by rank 0."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contract.configs import CLASSES, IMAGE_SHAPE
from contract.spec import RunSpec
from worker.datasets.bundle import DataBundle, Split

DATA_DIR_ENV = "SCALELAB_DATA_DIR"
DOWNLOAD_ENV = "SCALELAB_DATA_DOWNLOAD"
DEFAULT_DATA_DIR = "~/.cache/scalelab/data"
FOLDER = "cifar-10-batches-py"  # what the official cifar-10-python.tar.gz extracts to
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
VAL_FILE = "test_batch"

# Per-channel statistics of the training images, in [0, 1] units.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
CROP_PADDING = 4


def data_dir() -> Path:
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).expanduser()


def download_requested() -> bool:
    return os.environ.get(DOWNLOAD_ENV) == "1"


def _missing(folder: Path) -> list[str]:
    return [name for name in (*TRAIN_FILES, VAL_FILE) if not (folder / name).is_file()]


def _where_to_put_it(root: Path) -> str:
    return (
        f"put the official CIFAR-10 python version (cifar-10-python.tar.gz, extracted: {FOLDER}/data_batch_1..5 and "
        f"{FOLDER}/test_batch) in {root}, or point {DATA_DIR_ENV} at the directory that holds {FOLDER}/"
    )


def download(root: Path) -> None:
    # Imported only to download: torchvision takes seconds to import.
    import torchvision.datasets  # type: ignore[import-untyped]

    try:
        torchvision.datasets.CIFAR10(str(root), train=True, download=True)
    except Exception as exc:
        raise RuntimeError(f"downloading CIFAR-10 into {root} failed ({exc}); {_where_to_put_it(root)}") from exc


class _ArrayUnpickler(pickle.Unpickler):
    """Rebuilds the numpy arrays the official files hold, and refuses any other object a pickle could make."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in {
            ("numpy.core.multiarray", "_reconstruct"),  # the official files, pickled by numpy 1
            ("numpy._core.multiarray", "_reconstruct"),  # files pickled by numpy 2
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
            ("_codecs", "encode"),  # bytes, as Python 3 pickles them with protocol 2
        }:
            if name == "_reconstruct":
                # The function this numpy pickles arrays with, wherever this numpy version keeps it.
                return np.zeros(0).__reduce__()[0]
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a CIFAR-10 batch file")


def read_batch(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images (N, 3, 32, 32) and long labels (N,) from one official batch file."""
    with path.open("rb") as f:
        batch = _ArrayUnpickler(f, encoding="bytes").load()
    images = torch.tensor(batch[b"data"], dtype=torch.uint8).reshape(-1, *IMAGE_SHAPE)
    labels = torch.tensor(batch[b"labels"], dtype=torch.long)
    if len(images) != len(labels):
        raise ValueError(f"{path}: {len(images)} images but {len(labels)} labels")
    return images, labels


def normalise(images: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    # In place: the training set alone is 600 MB as floats.
    return images.float().div_(255).sub_(mean).div_(std)


def augment(images: torch.Tensor) -> torch.Tensor:
    """Random crop after 4-pixel zero padding, and a random horizontal flip, for each image of the batch at once."""
    n, channels, height, width = images.shape
    padded = torch.nn.functional.pad(images, [CROP_PADDING] * 4)
    dy, dx = torch.randint(0, 2 * CROP_PADDING + 1, (2, n, 1), device=images.device)
    flip = torch.rand(n, 1, device=images.device) < 0.5
    rows = torch.arange(height, device=images.device) + dy
    across = torch.arange(width, device=images.device)
    # A flipped image reads its crop's columns right to left.
    cols = torch.where(flip, width - 1 - across, across) + dx
    return padded[
        torch.arange(n, device=images.device)[:, None, None, None],
        torch.arange(channels, device=images.device)[None, :, None, None],
        rows[:, None, :, None],
        cols[:, None, None, :],
    ]


def load(spec: RunSpec, rank: int) -> DataBundle:
    root = data_dir()
    folder = root / FOLDER
    if _missing(folder) and download_requested():
        if rank != 0:
            raise FileNotFoundError(
                f"CIFAR-10 is missing from {folder} on rank {rank}: only rank 0 downloads it, so it must finish "
                f"before the other ranks load, into a directory they all read; or {_where_to_put_it(root)}"
            )
        download(root)
    if missing := _missing(folder):
        raise FileNotFoundError(
            f"CIFAR-10 not found: {folder} lacks {', '.join(missing)}. To fix it, {_where_to_put_it(root)}; "
            f"or set {DOWNLOAD_ENV}=1 to download it there (rank 0 only; needs internet)"
        )
    parts = [read_batch(folder / name) for name in TRAIN_FILES]
    train_images, train_labels = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    val_images, val_labels = read_batch(folder / VAL_FILE)
    return DataBundle(
        Split(normalise(train_images), train_labels),
        Split(normalise(val_images), val_labels),
        CLASSES,
        IMAGE_SHAPE,
        "classification",
        augment=augment,
    )
