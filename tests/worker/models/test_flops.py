"""Each model's FLOP count (contract/flops.py, torch-free) against torch's own count of the built model's forward.

torch.utils.flop_counter.FlopCounterMode counts matrix products, convolutions and attention, as contract.flops
does, so the two agree exactly: the tolerance is none. A layer added to a model without its arithmetic added to the
count fails here. Attention runs on SDPA's math kernel while counted: the counter has no formula for the fused CPU
kernel (it would count none of attention's products on CPU), while the math kernel's are plain batched products.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from contract import configs, flops
from tests.factories import spec
from tests.worker.models.building import build

CASES = [
    ("mlp", "synthetic", {}),
    ("mlp", "digits", {"depth": 3, "width": 64}),
    ("mlp", "cifar10", {}),
    ("cnn", "synthetic", {}),
    ("cnn", "cifar10", {}),
    ("resnet18", "synthetic", {}),
    ("gpt", "synthetic", {}),
    ("gpt", "text", {"depth": 2, "width": 96, "heads": 3, "context": 32}),
]


def torch_forward_flops(module: torch.nn.Module, sample: torch.Tensor) -> int:
    module.eval()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        module(sample.unsqueeze(0))
    return int(counter.get_total_flops())


@pytest.mark.parametrize(("model", "dataset", "fields"), CASES)
def test_forward_flops_are_torchs_count(bundles, model, dataset, fields):
    bundle = bundles(model, dataset)
    run = spec(model=model, dataset=dataset, **fields)
    module = build(model, dataset, bundle, **fields)
    sample = bundle.train.inputs[0]
    if model == "gpt" and "context" in fields:
        sample = sample[: fields["context"]]
    assert flops.forward_flops(run).total == torch_forward_flops(module, sample)


@pytest.mark.parametrize(("model", "dataset", "fields"), CASES)
def test_data_shape_is_what_the_worker_loads(bundles, model, dataset, fields):
    bundle = bundles(model, dataset)
    shape = configs.data_shape(spec(model=model, dataset=dataset))
    assert shape.sample_shape == bundle.sample_shape
    assert shape.classes == bundle.num_classes


def test_checkpointed_units_are_the_models_own(bundles):
    """The recomputed part is torch's count of the units each spec checkpoints: gpt's blocks, resnet18's stages."""
    from worker import models

    for model, dataset in (("gpt", "synthetic"), ("resnet18", "synthetic")):
        bundle = bundles(model, dataset)
        module = build(model, dataset, bundle)
        units = models.model_spec(spec(model=model).model).checkpoint_units
        assert units is not None
        module.eval()
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            module(bundle.train.inputs[:1])
        per_module = counter.get_flop_counts()
        names = {id(unit): name for name, unit in module.named_modules()}
        counted = 0
        for unit in units(module):
            fqn = names[id(unit)]
            counted += sum(per_module.get(f"{type(module).__name__}.{fqn}", {}).values())
        assert counted == flops.forward_flops(spec(model=model, dataset=dataset)).checkpointed > 0


def test_training_is_three_forwards_and_recomputation_only_in_hardware_flops():
    plain = flops.training_flops(spec(model="gpt"))
    forward = flops.forward_flops(spec(model="gpt"))
    assert plain.model == plain.hardware == 3 * forward.total
    recomputed = flops.training_flops(spec(model="gpt", activation_checkpointing=True))
    assert recomputed.model == plain.model
    assert recomputed.hardware == plain.model + forward.checkpointed
    assert forward.checkpointed < forward.total  # the embeddings' and the head's are not recomputed


def test_utilization_is_samples_times_flops_over_the_devices_peak():
    assert flops.utilization(100.0, 1e9, 1.0, 2) == pytest.approx(0.05)
