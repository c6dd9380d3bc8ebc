"""Model configs: the defaults, a spec's sizes over them, and the worker's models and data sets built to match."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from contract.configs import (
    CLASSES,
    CONFIGS,
    DIGITS_FEATURES,
    DIGITS_SAMPLES,
    IMAGE_SHAPE,
    SYNTHETIC_FEATURES,
    SYNTHETIC_IMAGES,
    SYNTHETIC_SEQUENCES,
    SYNTHETIC_VECTORS,
    SYNTHETIC_VOCAB,
    TEXT_MAX_CHARS,
    TEXT_VOCAB,
    CnnConfig,
    GptConfig,
    MlpConfig,
    Resnet18Config,
    paired_splits,
    resolve,
    why_heads_do_not_split,
    why_width_does_not_split,
)
from contract.spec import Model
from tests.factories import spec

# Written out rather than read from the classes: a default that moves should fail here, on purpose.
DEFAULTS: dict[str, dict[str, Any]] = {
    "mlp": {"depth": 2, "width": 256},
    "cnn": {"input_shape": (3, 32, 32), "channels": (32, 64, 128), "hidden": 256},
    "resnet18": {
        "input_shape": (3, 32, 32),
        "stem": 64,
        "stages": ((64, 2), (128, 2), (256, 2), (512, 2)),
        "features": 512,
    },
    "gpt": {"depth": 4, "width": 128, "heads": 4, "context": 64, "mlp_ratio": 4},
}


@pytest.mark.parametrize("model", list(Model))
def test_a_spec_without_sizes_resolves_to_the_defaults(model):
    config = resolve(spec(model=model))
    assert type(config) is CONFIGS[model]
    assert asdict(config) == DEFAULTS[model]
    assert config == CONFIGS[model]() == CONFIGS[model].of(spec(model=model))


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"model": "mlp", "depth": 3, "width": 64}, MlpConfig(depth=3, width=64)),
        ({"model": "mlp", "width": 64}, MlpConfig(depth=2, width=64)),
        (
            {"model": "gpt", "depth": 2, "width": 48, "heads": 3, "context": 16},
            GptConfig(depth=2, width=48, heads=3, context=16),
        ),
        ({"model": "gpt", "width": 64}, GptConfig(depth=4, width=64, heads=4, context=64)),
        # The spec sizes neither convolutional network: its sizes leave them as they are.
        ({"model": "cnn", "width": 64, "depth": 3}, CnnConfig()),
        ({"model": "resnet18", "width": 64}, Resnet18Config()),
    ],
    ids=["mlp", "mlp-width", "gpt", "gpt-width", "cnn", "resnet18"],
)
def test_the_sizes_a_spec_sets_win(fields, expected):
    assert resolve(spec(**fields)) == expected


def test_gpt_heads_share_the_width():
    assert GptConfig().head_dim == 32
    assert GptConfig.of(spec(model="gpt", width=48, heads=3)).head_dim == 16


def test_stacked_linears_split_in_column_row_pairs_and_an_unpaired_last_stays_whole():
    assert paired_splits(2) == ["column", "row"]
    assert paired_splits(3) == ["column", "row", None]
    assert paired_splits(6) == ["column", "row"] * 3


def test_the_tensor_parallel_rules_say_why_a_degree_does_not_split():
    assert why_heads_do_not_split(4, 2) is None
    assert why_heads_do_not_split(6, 4) == "gpt has 6 attention heads, which do not split over 4 ranks"
    assert GptConfig(heads=6, width=96).why_heads_do_not_split(4, "the checkpoint's gpt") == (
        "the checkpoint's gpt has 6 attention heads, which do not split over 4 ranks"
    )
    assert why_width_does_not_split(256, 4) is None
    assert why_width_does_not_split(30, 4) == "mlp width 30 does not split over 4 tensor-parallel ranks"


def test_a_gpt_block_splits_each_attention_and_feed_forward_pair_column_then_row():
    linears = GptConfig(width=64, mlp_ratio=4).block_linears()
    assert [(linear.name, linear.split) for linear in linears] == [
        ("attn.q", "column"),
        ("attn.k", "column"),
        ("attn.v", "column"),
        ("attn.proj", "row"),
        ("mlp.fc", "column"),
        ("mlp.proj", "row"),
    ]
    assert [(linear.n_in, linear.n_out) for linear in linears][-2:] == [(64, 256), (256, 64)]


# --- the worker builds what the config says ---


def _built(fields: dict[str, Any]) -> Any:
    """The worker's model for a spec, on the data set it loads; typed loosely to reach into its layers."""
    pytest.importorskip("torch")
    from worker import data, models

    run = spec(**fields)
    return models.build(run, data.load(run, rank=0))


@pytest.mark.torch
@pytest.mark.parametrize("fields", [{}, {"depth": 3, "width": 64}], ids=["default", "sized"])
def test_mlp_is_built_to_its_config(fields):
    from torch import nn

    config = MlpConfig.of(spec(model="mlp", **fields))
    net = _built({"model": "mlp", **fields})
    linears = [layer for layer in net if isinstance(layer, nn.Linear)]
    assert len(linears) == config.depth + 1
    assert [layer.out_features for layer in linears[:-1]] == [config.width] * config.depth
    assert linears[-1].in_features == config.width


@pytest.mark.torch
def test_cnn_is_built_to_its_config():
    from torch import nn

    config = CnnConfig()
    net = _built({"model": "cnn"})
    assert net[0].shape == config.input_shape
    convs = [layer for layer in net if isinstance(layer, nn.Conv2d)]
    assert convs[0].in_channels == config.input_shape[0]
    assert tuple(conv.out_channels for conv in convs) == config.channels
    assert next(layer for layer in net if isinstance(layer, nn.Linear)).out_features == config.hidden


@pytest.mark.torch
def test_resnet18_is_built_to_its_config():
    config = Resnet18Config()
    net = _built({"model": "resnet18"})
    assert (net.conv1.in_channels, net.conv1.out_channels) == (config.input_shape[0], config.stem)
    stages = [net.get_submodule(f"layer{number}") for number in range(1, len(config.stages) + 1)]
    assert [(stage[0].conv1.out_channels, len(stage)) for stage in stages] == list(config.stages)
    assert net.fc.in_features == config.features


@pytest.mark.torch
@pytest.mark.parametrize(
    "fields", [{}, {"width": 64}, {"depth": 2, "width": 48, "heads": 3, "context": 16}], ids=["default", "w64", "all"]
)
def test_gpt_is_built_to_its_config(fields):
    config = GptConfig.of(spec(model="gpt", **fields))
    net = _built({"model": "gpt", **fields})
    assert net.tok_emb.embedding_dim == config.width
    assert net.pos_emb.num_embeddings == config.context
    assert len(net.blocks) == config.depth
    block = net.blocks["0"]
    assert block.attn.head_dim == config.head_dim
    assert block.mlp.fc.out_features == config.mlp_ratio * config.width
    for linear in config.block_linears():
        layer = block.get_submodule(linear.name)
        assert (layer.in_features, layer.out_features) == (linear.n_in, linear.n_out), linear.name


# --- the data sets hold what the config says (the memory estimate counts their bytes from it) ---


@pytest.mark.torch
@pytest.mark.parametrize(
    ("model", "shape", "classes", "splits"),
    [
        ("mlp", (SYNTHETIC_FEATURES,), CLASSES, SYNTHETIC_VECTORS),
        ("cnn", IMAGE_SHAPE, CLASSES, SYNTHETIC_IMAGES),
        ("gpt", (GptConfig().context,), SYNTHETIC_VOCAB, SYNTHETIC_SEQUENCES),
    ],
)
def test_synthetic_data_has_the_configs_shape_and_size(model, shape, classes, splits):
    pytest.importorskip("torch")
    from worker.datasets import synthetic

    bundle = synthetic.load(spec(model=model), rank=0)
    assert (bundle.sample_shape, bundle.num_classes) == (shape, classes)
    assert (len(bundle.train), len(bundle.val)) == splits


@pytest.mark.torch
def test_digits_have_the_configs_shape_and_size():
    pytest.importorskip("torch")
    from worker.datasets import digits

    bundle = digits.load(spec(dataset="digits"), rank=0)
    assert (bundle.sample_shape, bundle.num_classes) == ((DIGITS_FEATURES,), CLASSES)
    assert (len(bundle.train), len(bundle.val)) == DIGITS_SAMPLES


@pytest.mark.torch
def test_text_has_the_configs_length_vocabulary_and_context():
    pytest.importorskip("torch")
    from worker.datasets import text

    corpus = text.corpus()
    assert (len(corpus), len(set(corpus))) == (TEXT_MAX_CHARS, TEXT_VOCAB)
    bundle = text.load(spec(model="gpt", dataset="text", context=32), rank=0)
    assert (bundle.sample_shape, bundle.num_classes) == ((32,), TEXT_VOCAB)
