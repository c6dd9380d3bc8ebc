"""The data sets the model tests build on, loaded once per module; CIFAR-10 from a small archive."""

from __future__ import annotations

import pytest

from tests.factories import spec
from tests.worker.cifar_fixture import write_cifar10
from worker import data
from worker.datasets import cifar10


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """Each data set once per model shape; CIFAR-10 from a small archive in the official format."""
    root = tmp_path_factory.mktemp("data")
    write_cifar10(root)
    cache: dict[tuple[str, str], data.DataBundle] = {}

    def get(model: str, dataset: str) -> data.DataBundle:
        key = ("gpt" if model == "gpt" else "images" if model in ("cnn", "resnet18") else model, dataset)
        if key not in cache:
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv(cifar10.DATA_DIR_ENV, str(root))
                cache[key] = data.load(spec(model=model, dataset=dataset), rank=0)
        return cache[key]

    return get
