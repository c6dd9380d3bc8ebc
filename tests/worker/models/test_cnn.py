"""The course CNN: flat, so that pipeline stages are slices, and strict about its input's shape."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.factories import spec
from tests.worker.models.building import build
from worker.models import cnn


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
