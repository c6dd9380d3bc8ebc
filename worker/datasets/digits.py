"""scikit-learn's 8x8 handwritten digits: the real data set that ships with the library, so no download."""

from __future__ import annotations

import torch

from contract.configs import CLASSES, DIGITS_FEATURES
from contract.spec import RunSpec
from worker.datasets.bundle import DataBundle, Split

VAL_FRACTION = 0.2
PIXEL_MAX = 16.0  # the data set's grey levels run from 0 to 16


def load(spec: RunSpec, rank: int) -> DataBundle:
    # Imported only when asked for: scikit-learn takes a second to import.
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]

    raw = load_digits()
    inputs = torch.tensor(raw.data, dtype=torch.float32) / PIXEL_MAX
    targets = torch.tensor(raw.target, dtype=torch.long)
    order = torch.randperm(len(targets), generator=torch.Generator().manual_seed(spec.seed))
    n_val = round(len(targets) * VAL_FRACTION)
    train, val = order[n_val:], order[:n_val]
    # One mean and deviation from the training pixels: per-pixel ones blow up the corners, which are nearly always 0.
    mean, std = inputs[train].mean(), inputs[train].std()
    inputs = (inputs - mean) / std
    return DataBundle(
        Split(inputs[train], targets[train]),
        Split(inputs[val], targets[val]),
        CLASSES,
        (DIGITS_FEATURES,),
        "classification",
    )
