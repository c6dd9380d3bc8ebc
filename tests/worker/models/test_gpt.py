"""The small gpt: the names its spec's plans use, its sizes, causality, pipeline stages, and sharded heads."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from tests.factories import spec
from tests.worker.models.building import build
from worker import data
from worker.models import gpt
from worker.parallel.dims import DegreeError


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


def test_gpt_splits_each_block_as_its_description_says(bundles):
    net = build("gpt", "synthetic", bundles("gpt", "synthetic"))
    plan = gpt.tensor_plan(net, 2)
    assert len(plan) == 4 * 6
    assert {name: type(style) for name, style in plan.items() if name.startswith("blocks.0.")} == {
        "blocks.0.attn.q": ColwiseParallel,
        "blocks.0.attn.k": ColwiseParallel,
        "blocks.0.attn.v": ColwiseParallel,
        "blocks.0.attn.proj": RowwiseParallel,
        "blocks.0.mlp.fc": ColwiseParallel,
        "blocks.0.mlp.proj": RowwiseParallel,
    }
    with pytest.raises(DegreeError, match="gpt has 4 attention heads, which do not split over 3 ranks"):
        gpt.tensor_plan(net, 3)


def test_gpt_pipeline_stages_keep_their_blocks_and_ends(bundles):
    net = build("gpt", "synthetic", bundles("gpt", "synthetic"))
    first: Any = gpt.pipeline_stage(copy.deepcopy(net), 0, 2)
    last: Any = gpt.pipeline_stage(copy.deepcopy(net), 1, 2)
    assert (list(first.blocks), list(last.blocks)) == (["0", "1"], ["2", "3"])
    assert first.head is None and first.tok_emb is not None
    assert last.tok_emb is None and last.pos_emb is None and last.head is not None
    with pytest.raises(DegreeError, match="gpt has 4 blocks: too few for 5 pipeline stages"):
        gpt.pipeline_stage(copy.deepcopy(net), 0, 5)
