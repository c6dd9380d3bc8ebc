"""The training courses' CIFAR-10 CNN: three conv/batch-norm/ReLU/pool stages, then a two-layer head; and its spec.

One flat nn.Sequential, so that pipeline parallelism can cut it into stages by slicing.
"""

from __future__ import annotations

from torch import Tensor, nn

from contract.configs import CnnConfig
from contract.spec import Model, RunSpec
from worker.datasets.bundle import DataBundle
from worker.models import sequential


class ExpectShape(nn.Module):
    """Fails early and clearly on inputs of another shape than the network was built for."""

    def __init__(self, *shape: int) -> None:
        super().__init__()
        self.shape = shape

    def forward(self, x: Tensor) -> Tensor:
        # A check that survives `python -O`, unlike an assert.
        if x.shape[1:] != self.shape:
            raise ValueError(f"the cnn reads images {self.shape}, got a batch {tuple(x.shape)}")
        return x

    def extra_repr(self) -> str:
        return str(self.shape)


def build(spec: RunSpec, bundle: DataBundle) -> nn.Sequential:
    config = CnnConfig.of(spec)
    shape = config.input_shape
    if bundle.sample_shape != shape:
        raise ValueError(f"the cnn reads images {shape}; data set '{spec.dataset}' has {bundle.sample_shape}")
    layers: list[nn.Module] = [ExpectShape(*shape)]
    channels, side = shape[0], shape[1]
    for out in config.channels:
        # No conv bias: the batch norm right after it has its own.
        layers += [nn.Conv2d(channels, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(), nn.MaxPool2d(2)]
        channels, side = out, side // 2
    layers += [
        nn.Flatten(),
        nn.Linear(channels * side * side, config.hidden),
        nn.ReLU(),
        nn.Linear(config.hidden, bundle.num_classes),
    ]
    return nn.Sequential(*layers)


# No tensor-parallel plan: convolutions are not split here.
SPEC = sequential.flat_spec(Model.cnn, CnnConfig, build, None)
