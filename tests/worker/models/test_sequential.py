"""Flat sequential models (mlp, cnn): stages cut before weighted layers, and those layers checkpointed."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from worker.models import sequential
from worker.parallel.dims import DegreeError


def net() -> nn.Sequential:
    return nn.Sequential(
        nn.Flatten(), nn.Linear(8, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)
    )


def test_stages_start_at_weighted_layers_and_together_are_the_model():
    model = net()
    stages: list[Any] = [sequential.cut_stage(model, stage, 2, "mlp") for stage in range(2)]
    assert [len(stage) for stage in stages] == [4, 3]  # the batch norm has weights too: four of them in all
    inputs = torch.randn(3, 2, 4)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(stages[1](stages[0](inputs)), model(inputs))
    with pytest.raises(DegreeError, match="mlp has 4 layers with weights: too few for 5 pipeline stages"):
        sequential.cut_stage(model, 0, 5, "mlp")


def test_weighted_layers_but_batch_norms_are_checkpointed():
    model = net()
    assert sequential.checkpoint_units(model) == [model[1], model[4], model[6]]
