"""Every model builds from its defaults, reads every data set it admits, and starts from the same weights per seed;
the registry refuses names no model has."""

from __future__ import annotations

import pytest
import torch

from contract.spec import DATASETS_BY_MODEL, Model
from tests.factories import spec
from tests.worker.models.building import build, count
from worker import models

PAIRS = sorted((model.value, dataset.value) for model, sets in DATASETS_BY_MODEL.items() for dataset in sets)


@pytest.mark.parametrize(("model", "dataset"), PAIRS)
def test_each_model_reads_each_data_set_it_admits(bundles, model, dataset):
    bundle = bundles(model, dataset)
    net = build(model, dataset, bundle).eval()
    inputs = bundle.val.inputs[:4]
    with torch.no_grad():
        out = net(inputs)
    expected = (4, *bundle.sample_shape, bundle.num_classes) if bundle.task == "language" else (4, bundle.num_classes)
    assert out.shape == expected
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("model", ["mlp", "cnn", "resnet18", "gpt"])
def test_same_seed_same_weights(bundles, model):
    bundle = bundles(model, "synthetic")
    a, b, c = (build(model, "synthetic", bundle, seed=seed).state_dict() for seed in (1, 1, 2))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[key], b[key]) for key in a)
    assert not all(torch.equal(a[key], c[key]) for key in a)


def test_default_parameter_counts(bundles):
    def linear(n_in, n_out):
        return n_in * n_out + n_out

    counts = {name: count(build(name, "synthetic", bundles(name, "synthetic"))) for name in ("mlp", "cnn", "gpt")}
    assert counts["mlp"] == linear(32, 256) + linear(256, 256) + linear(256, 10) == 76_810
    convs = 3 * 3 * (3 * 32 + 32 * 64 + 64 * 128) + 2 * (32 + 64 + 128)  # no conv bias; batch-norm scale and shift
    assert counts["cnn"] == convs + linear(128 * 4 * 4, 256) + linear(256, 10) == 620_586
    width, vocab, context = 128, 64, 64
    block = 2 * 2 * width + 4 * linear(width, width) + linear(width, 4 * width) + linear(4 * width, width)
    assert counts["gpt"] == (vocab + context) * width + 4 * block + 2 * width + linear(width, vocab) == 817_984
    # torchvision's ResNet-18 for 10 classes, its 7x7 stem swapped for a 3x3 one.
    assert count(build("resnet18", "synthetic", bundles("resnet18", "synthetic"))) == 11_173_962


def test_unknown_model_is_refused(bundles):
    unknown = spec().model_copy(update={"model": "bert"})
    with pytest.raises(ValueError, match="unknown model 'bert'; known: mlp, cnn, resnet18, gpt"):
        models.build(unknown, bundles("mlp", "synthetic"))


def test_a_model_refuses_data_of_the_other_task(bundles):
    with pytest.raises(ValueError, match="gpt models token sequences"):
        models.build(spec(model="gpt"), bundles("mlp", "synthetic"))
    with pytest.raises(ValueError, match="mlp classifies"):
        models.build(spec(), bundles("gpt", "synthetic"))


def test_each_model_has_its_spec():
    assert [models.model_spec(model).model for model in Model] == list(Model)
    with pytest.raises(ValueError, match="unknown model 'bert'; known: mlp, cnn, resnet18, gpt"):
        models.model_spec("bert")  # type: ignore[arg-type]
