"""ResNet-18 with the CIFAR stem, sharded and checkpointed stage by stage."""

from __future__ import annotations

from torch import nn

from tests.worker.models.building import build
from worker.models import resnet18


def test_resnet18_has_the_cifar_stem(bundles):
    net = build("resnet18", "synthetic", bundles("resnet18", "synthetic"))
    assert (net.conv1.kernel_size, net.conv1.stride) == ((3, 3), (1, 1))
    assert isinstance(net.maxpool, nn.Identity)
    assert net.fc.out_features == 10


def test_resnet18_stages_are_its_fsdp_and_checkpointing_units(bundles):
    net = build("resnet18", "synthetic", bundles("resnet18", "synthetic"))
    assert resnet18.stages(net) == [net.layer1, net.layer2, net.layer3, net.layer4]
    assert resnet18.SPEC.fsdp_units is resnet18.SPEC.checkpoint_units is resnet18.stages
    assert resnet18.SPEC.tensor_parallel is None and resnet18.SPEC.pipeline_stage is None
