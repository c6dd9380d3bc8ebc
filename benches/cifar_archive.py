"""A CIFAR-10 archive in the official Python format, with made-up but learnable images.

No data set can be downloaded on the benchmark machines, so the benchmark writes its own: both the worker and
the course-style baseline then read the very same files, through their own loaders.
"""

from __future__ import annotations

import argparse
import pickle
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

import numpy as np

from worker.datasets import cifar10

CLASSES = 10
SIDE = 32
COARSE = 4  # each class's pattern is a random 4x4 colour grid blown up to 32x32: smooth, so crops keep it
SHIFT = 4  # pixels a pattern may move (wrapping round): position alone must not give the class away
PATTERN_STD = 15.0  # grey levels, against pixel noise of NOISE_STD
# Share of images whose label is redrawn at random, in training and test files alike: no model can beat
# 1 - LABEL_NOISE * (1 - 1/CLASSES) on the test set, so both sides level off at the same known ceiling within a
# few epochs, and their accuracies can be compared without chance deciding which one is still climbing.
LABEL_NOISE = 0.2
NOISE_STD = 60.0
MEAN_LEVEL = 120.0


class _Python2Pickler(pickle._Pickler):
    """Pickles bytes as Python 2 `str`, which is what the official batch files hold (they were made with Python 2).

    Readers rely on that: torchvision loads them with encoding="latin1" and finds str keys ("data", "labels"),
    the worker with encoding="bytes" and finds b"data". Python 3's own pickler writes bytes as bytes objects,
    whose keys only the second kind of reader would find. Only the pure-Python pickler lets an opcode be chosen.
    """

    # Set up by pickle's pure-Python pickler, which typeshed leaves undeclared.
    write: Callable[[bytes], object]
    memoize: Callable[[object], None]

    def _save_python2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + struct.pack("<B", len(obj)) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch: ClassVar[dict[type, Any]] = {**pickle._Pickler.dispatch, bytes: _save_python2_str}


def _dump(obj: Any, f: BinaryIO) -> None:
    _Python2Pickler(f, protocol=2).dump(obj)  # the official files are protocol-2 pickles


def _patterns(rng: np.random.Generator) -> np.ndarray:
    """(CLASSES, 3, 32, 32) smooth colour patterns, by bilinear blow-up of a coarse random grid."""
    coarse = rng.normal(0.0, PATTERN_STD, size=(CLASSES, 3, COARSE, COARSE))
    # Sample positions of the 32 output pixels on the coarse grid (pixel centres, clamped at the borders).
    pos = np.clip((np.arange(SIDE) + 0.5) * COARSE / SIDE - 0.5, 0, COARSE - 1)
    low = np.floor(pos).astype(int)
    high = np.minimum(low + 1, COARSE - 1)
    frac = pos - low
    rows = coarse[:, :, low, :] * (1 - frac)[:, None] + coarse[:, :, high, :] * frac[:, None]
    out: np.ndarray = rows[:, :, :, low] * (1 - frac) + rows[:, :, :, high] * frac
    return out


def _draw(rng: np.random.Generator, patterns: np.ndarray, n: int) -> tuple[np.ndarray, list[int]]:
    labels = rng.integers(0, CLASSES, size=n)
    dy, dx = rng.integers(-SHIFT, SHIFT + 1, size=(2, n))
    rows = (np.arange(SIDE)[None, :] + dy[:, None]) % SIDE
    cols = (np.arange(SIDE)[None, :] + dx[:, None]) % SIDE
    shifted = patterns[
        labels[:, None, None, None], np.arange(3)[None, :, None, None], rows[:, None, :, None], cols[:, None, None, :]
    ]
    images = MEAN_LEVEL + shifted + rng.normal(0.0, NOISE_STD, size=shifted.shape)
    # The official layout: one row of 3072 bytes per image, the red plane, then green, then blue.
    flat = np.clip(np.rint(images), 0, 255).astype(np.uint8).reshape(n, 3 * SIDE * SIDE)
    relabel = rng.random(n) < LABEL_NOISE
    labels = np.where(relabel, rng.integers(0, CLASSES, size=n), labels)
    return flat, [int(label) for label in labels]


def accuracy_ceiling() -> float:
    """The best expected test accuracy: the labels left alone, plus the redrawn ones that came out right anyway."""
    return 1 - LABEL_NOISE * (1 - 1 / CLASSES)


def write_batches(root: Path, batches: dict[str, tuple[np.ndarray, list[int]]]) -> Path:
    """Write `root/cifar-10-batches-py/` as the official archive extracts: one file per (uint8 rows, labels)."""
    folder = root / cifar10.FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    for name, (data, labels) in batches.items():
        batch = {
            b"batch_label": name.encode(),
            b"labels": labels,
            b"data": data,
            b"filenames": [f"{name}_{i}.png".encode() for i in range(len(labels))],
        }
        with (folder / name).open("wb") as f:
            _dump(batch, f)
    # torchvision's CIFAR10 also reads the class names from here.
    per_batch = len(next(iter(batches.values()))[1]) if batches else 0
    meta = {b"label_names": [f"class{i}".encode() for i in range(CLASSES)], b"num_cases_per_batch": per_batch}
    with (folder / "batches.meta").open("wb") as f:
        _dump(meta, f)
    return folder


def write(root: Path, per_batch: int, test: int, seed: int = 0) -> Path:
    """The benchmark's archive: learnable class patterns in data_batch_1..5 and test_batch."""
    rng = np.random.default_rng(seed)
    patterns = _patterns(rng)
    names = (*cifar10.TRAIN_FILES, cifar10.VAL_FILE)
    return write_batches(
        root, {name: _draw(rng, patterns, test if name == cifar10.VAL_FILE else per_batch) for name in names}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", type=Path, help="the directory to hold cifar-10-batches-py/")
    parser.add_argument("--per-batch", type=int, default=1024, help="images in each of the 5 training files")
    parser.add_argument("--test", type=int, default=1024, help="images in test_batch")
    args = parser.parse_args()
    print(write(args.root, args.per_batch, args.test))


if __name__ == "__main__":
    main()
