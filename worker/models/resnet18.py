"""torchvision's ResNet-18 with the usual CIFAR stem: a 3x3 stride-1 first convolution and no max-pool,
since 32x32 images would otherwise shrink to 8x8 before the first residual block; and its spec."""

from __future__ import annotations

from torch import nn

from contract.configs import Resnet18Config
from contract.spec import Model, RunSpec
from worker.datasets.bundle import DataBundle
from worker.models.spec import ModelSpec


def build(spec: RunSpec, bundle: DataBundle) -> nn.Module:
    # Imported only when used: torchvision takes seconds to import.
    from torchvision.models import resnet18  # type: ignore[import-untyped]

    config = Resnet18Config.of(spec)
    channels = config.input_shape[0]
    if bundle.task != "classification" or len(bundle.sample_shape) != 3 or bundle.sample_shape[0] != channels:
        raise ValueError(f"resnet18 reads RGB images; data set '{spec.dataset}' has samples {bundle.sample_shape}")
    model = resnet18(weights=None, num_classes=bundle.num_classes)
    model.conv1 = nn.Conv2d(channels, config.stem, kernel_size=3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")  # as torchvision does
    model.maxpool = nn.Identity()
    return model  # type: ignore[no-any-return]


def stages(model: nn.Module) -> list[nn.Module]:
    """The residual stages, torchvision's `layer1` to `layer4`: the units FSDP shards and checkpointing recomputes."""
    return [model.get_submodule(f"layer{number}") for number in range(1, len(Resnet18Config.stages) + 1)]


# Neither tensor nor pipeline parallel: torchvision's model is neither split nor cut here.
SPEC = ModelSpec(
    model=Model.resnet18,
    config=Resnet18Config,
    build=build,
    fsdp_units=stages,
    checkpoint_units=stages,
)
