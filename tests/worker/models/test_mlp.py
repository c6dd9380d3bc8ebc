"""The course MLP: its layers, its tensor-parallel plan, and that it learns."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
from torch.nn import functional as F

from tests.worker.models.building import build
from worker.models import mlp
from worker.parallel.dims import DegreeError


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


def test_mlp_splits_its_linear_layers_in_column_row_pairs(bundles):
    net = build("mlp", "synthetic", bundles("mlp", "synthetic"), depth=3)  # four Linear layers: two pairs
    plan = mlp.tensor_plan(net, 2)
    assert {name: type(style) for name, style in plan.items()} == {
        "1": ColwiseParallel,
        "3": RowwiseParallel,
        "5": ColwiseParallel,
        "7": RowwiseParallel,
    }
    # Three Linear layers: the last, unpaired, stays whole.
    assert list(mlp.tensor_plan(build("mlp", "synthetic", bundles("mlp", "synthetic")), 2)) == ["1", "3"]
    with pytest.raises(DegreeError, match="mlp width 256 does not split over 3 tensor-parallel ranks"):
        mlp.tensor_plan(net, 3)
