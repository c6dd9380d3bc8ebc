"""Every model builds from its defaults, reads every data set it admits, and starts from the same weights per seed."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from contract.spec import DATASETS_BY_MODEL
from tests.factories import spec
from tests.worker.cifar_fixture import write_cifar10
from worker import data, models
from worker.datasets import cifar10
from worker.models import cnn, gpt

PAIRS = sorted((model.value, dataset.value) for model, sets in DATASETS_BY_MODEL.items() for dataset in sets)


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


def build(model: str, dataset: str, bundle: data.DataBundle, seed: int = 0, **fields) -> Any:
    """The model, typed loosely: tests reach into each model's own attributes."""
    torch.manual_seed(seed)
    return models.build(spec(model=model, dataset=dataset, **fields), bundle)


def count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


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


# --- mlp ---


def test_mlp_is_one_flat_sequence_of_linear_and_relu(bundles):
    net = build("mlp", "synthetic", bundles("mlp", "synthetic"))
    assert isinstance(net, nn.Sequential)
    assert [type(m).__name__ for m in net] == ["Flatten", "Linear", "ReLU", "Linear", "ReLU", "Linear"]
    deeper = build("mlp", "cifar10", bundles("mlp", "cifar10"), depth=4, width=64)
    linears = [m for m in deeper if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(3072, 64), (64, 64), (64, 64), (64, 64), (64, 10)]


def test_mlp_learns_the_real_digits(bundles):
    """A short plain loop, the shared training loop's job in miniature: well above 95% in a few epochs."""
    bundle = bundles("mlp", "digits")
    net = build("mlp", "digits", bundle)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(10):
        for batch in torch.randperm(len(bundle.train), generator=generator).split(32):
            loss = F.cross_entropy(net(bundle.train.inputs[batch]), bundle.train.targets[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        accuracy = (net(bundle.val.inputs).argmax(dim=1) == bundle.val.targets).float().mean().item()
    assert accuracy >= 0.95


# --- cnn and resnet18 ---


def test_cnn_is_flat_so_pipeline_stages_are_slices(bundles):
    bundle = bundles("cnn", "synthetic")
    net = build("cnn", "synthetic", bundle).eval()
    assert isinstance(net, nn.Sequential)
    assert all(not list(layer.children()) for layer in net)
    inputs = bundle.val.inputs[:2]
    with torch.no_grad():
        whole = net(inputs)
        for cut in (4, 9, len(net) - 2):
            torch.testing.assert_close(net[cut:](net[:cut](inputs)), whole)


def test_cnn_refuses_other_image_shapes(bundles):
    net = build("cnn", "synthetic", bundles("cnn", "synthetic"))
    with pytest.raises(ValueError, match=r"reads images \(3, 32, 32\), got a batch \(2, 3, 28, 28\)"):
        net(torch.zeros(2, 3, 28, 28))
    with pytest.raises(ValueError, match="cnn reads images"):
        cnn.build(spec(model="cnn", dataset="synthetic"), bundles("mlp", "synthetic"))


def test_resnet18_has_the_cifar_stem(bundles):
    net = build("resnet18", "synthetic", bundles("resnet18", "synthetic"))
    assert (net.conv1.kernel_size, net.conv1.stride) == ((3, 3), (1, 1))
    assert isinstance(net.maxpool, nn.Identity)
    assert net.fc.out_features == 10


# --- gpt ---


def test_gpt_has_the_names_the_parallel_plans_use(bundles):
    net = build("gpt", "synthetic", bundles("gpt", "synthetic"))
    assert net.head.weight.data_ptr() != net.tok_emb.weight.data_ptr()  # untied
    assert isinstance(net, gpt.GPT)
    assert list(net.blocks.keys()) == ["0", "1", "2", "3"]
    for name in ("tok_emb", "pos_emb", "norm", "head"):
        assert isinstance(getattr(net, name), nn.Module)
    block = net.blocks["0"]
    assert isinstance(block, gpt.Block)
    for name in ("ln1", "attn.q", "attn.k", "attn.v", "attn.proj", "ln2", "mlp.fc", "mlp.proj"):
        block.get_submodule(name)
    assert block.attn.head_dim == 128 // 4


def test_gpt_reads_its_size_from_the_spec(bundles):
    bundle = data.load(spec(model="gpt", context=16), rank=0)
    net = build("gpt", "synthetic", bundle, depth=2, width=48, heads=3, context=16)
    assert len(net.blocks) == 2
    assert net.pos_emb.num_embeddings == 16
    assert net.blocks["1"].attn.head_dim == 16
    assert net(bundle.val.inputs[:2]).shape == (2, 16, 64)
    with pytest.raises(ValueError, match=r"width \(30\) must be divisible by heads \(4\)"):
        build("gpt", "synthetic", bundle, width=30)


def test_gpt_is_causal(bundles):
    bundle = bundles("gpt", "synthetic")
    net = build("gpt", "synthetic", bundle).eval()
    tokens = bundle.val.inputs[:2].clone()
    with torch.no_grad():
        before = net(tokens)
        tokens[:, 40:] = (tokens[:, 40:] + 1) % bundle.num_classes
        after = net(tokens)
    torch.testing.assert_close(after[:, :40], before[:, :40])
    assert not torch.allclose(after[:, 40:], before[:, 40:])


def test_gpt_cut_into_pipeline_stages_computes_the_same(bundles):
    bundle = bundles("gpt", "synthetic")
    net = build("gpt", "synthetic", bundle).eval()
    first, last = copy.deepcopy(net), copy.deepcopy(net)
    del first.blocks["2"], first.blocks["3"]
    first.norm = first.head = None
    del last.blocks["0"], last.blocks["1"]
    last.tok_emb = last.pos_emb = None
    tokens = bundle.val.inputs[:2]
    with torch.no_grad():
        hidden = first(tokens)
        assert hidden.shape == (2, 64, 128)
        torch.testing.assert_close(last(hidden), net(tokens))
        # A middle stage with no blocks at all passes the hidden states through.
        middle = copy.deepcopy(last)
        middle.norm = middle.head = None
        middle.blocks.clear()
        assert torch.equal(middle(hidden), hidden)


def test_gpt_attention_infers_its_heads_from_sharded_projections():
    """Tensor parallelism gives each rank half the q/k/v columns and half the proj rows: half the heads each."""
    torch.manual_seed(0)
    attn = gpt.Attention(width=64, heads=4).eval()
    x = torch.randn(2, 8, 64)
    shards = []
    for half in (slice(0, 32), slice(32, 64)):
        shard = copy.deepcopy(attn)
        for name in ("q", "k", "v"):
            full: nn.Linear = getattr(attn, name)
            part = nn.Linear(64, 32)
            part.weight.data, part.bias.data = full.weight[half].clone(), full.bias[half].clone()
            setattr(shard, name, part)
        shard.proj = nn.Linear(32, 64)
        shard.proj.weight.data = attn.proj.weight[:, half].clone()
        shard.proj.bias.data = attn.proj.bias.clone() / 2  # the all-reduce sums both shards' outputs
        shards.append(shard)
    with torch.no_grad():
        torch.testing.assert_close(shards[0](x) + shards[1](x), attn(x))
