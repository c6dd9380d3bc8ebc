"""Precision, activation checkpointing, compilation, and every model with every strategy it admits."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contract import flops
from contract.spec import STRATEGIES_BY_MODEL, Model, RunSpec, Strategy
from tests.worker.launch import run_worker
from worker import data
from worker.models import build

pytestmark = pytest.mark.torch

FEW_STEPS: dict[str, Any] = {"epochs": 1, "steps_per_epoch": 5, "step_log_every": 1, "global_batch_size": 16}


def ok(run):
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def test_bf16_trains_close_to_fp32(tmp_path):
    fp32 = ok(run_worker(tmp_path, 1, model="mlp", strategy="single", **FEW_STEPS)).step_losses()
    bf16 = ok(run_worker(tmp_path, 1, model="mlp", strategy="single", precision="bf16", **FEW_STEPS)).step_losses()
    assert bf16 != fp32  # autocast really ran in bf16
    assert bf16 == pytest.approx(fp32, rel=0.05)


def test_fp16_without_cuda_is_refused_with_the_way_out(tmp_path):
    run = run_worker(tmp_path, 1, model="mlp", strategy="single", precision="fp16", **FEW_STEPS)
    assert run.returncode != 0
    assert "fp16 needs CUDA" in run.stderr and "use bf16 or fp32" in run.stderr


def test_activation_checkpointing_changes_memory_not_results(tmp_path):
    fields = {"model": "gpt", "strategy": "fsdp", "lr": 0.01, **FEW_STEPS}
    plain = ok(run_worker(tmp_path, 2, **fields)).step_losses()
    checkpointed = ok(run_worker(tmp_path, 2, activation_checkpointing=True, **fields)).step_losses()
    assert checkpointed == pytest.approx(plain, rel=1e-5)


def test_compiled_model_trains_like_eager(tmp_path):
    eager = ok(run_worker(tmp_path, 1, model="mlp", strategy="single", **FEW_STEPS)).step_losses()
    compiled = ok(run_worker(tmp_path, 1, model="mlp", strategy="single", compile=True, **FEW_STEPS)).step_losses()
    assert compiled == pytest.approx(eager, rel=1e-4)


# mlp and gpt run every strategy in parallel/test_strategies.py; these are the rest.
OTHERS = [
    (model, strategy) for model in (Model.cnn, Model.resnet18) for strategy in sorted(STRATEGIES_BY_MODEL[model])
] + [(Model.gpt, Strategy.ddp)]


@pytest.mark.parametrize(("model", "strategy"), OTHERS)
def test_every_admitted_combination_trains(tmp_path, model, strategy):
    processes = 1 if strategy is Strategy.single else 2
    run = ok(run_worker(tmp_path, processes, model=model, strategy=strategy, microbatches=2, **FEW_STEPS))
    losses = run.step_losses()
    assert len(losses) == 5 and all(loss == loss and loss > 0 for loss in losses)  # finite, positive
    assert run.of_kind("end")[0].status == "completed"


def test_mfu_on_cpu_is_the_epoch_s_flops_over_the_measured_peak(tmp_path):
    """The compute probe's record comes first, and the epoch's MFU is its arithmetic over the measured peak. Not
    asserted at most 1: on a shared machine the probe can meet a busier moment than the epoch (1.7 was seen under
    load), which is what the server's mfu_impossible flag is for."""
    run = ok(run_worker(tmp_path, 1, model="gpt", strategy="single", **FEW_STEPS))
    (probe,) = run.of_kind("compute")
    (epoch,) = run.of_kind("epoch")
    assert probe.device == "cpu" and probe.device_name is None and probe.operator_peak_tflops is None
    assert probe.measured_tflops == max(probe.size_tflops) > 0 and len(probe.sizes) == len(probe.size_tflops) >= 1
    context = 64  # gpt's default
    assert epoch.tokens_per_s == pytest.approx(epoch.samples_per_s * context)
    per_sample = flops.training_flops(RunSpec(model="gpt", strategy="single", **FEW_STEPS))
    assert epoch.model_flops_per_sample == epoch.hardware_flops_per_sample == per_sample.model
    assert epoch.model_tflops_per_s == pytest.approx(epoch.samples_per_s * per_sample.model / 1e12)
    assert epoch.mfu == pytest.approx(epoch.model_tflops_per_s / probe.measured_tflops)
    assert epoch.mfu > 0
    assert epoch.val_perplexity > 1


def test_the_operators_peak_overrides_the_measured_one(tmp_path):
    fields = {"model": "mlp", "strategy": "single", "activation_checkpointing": True, **FEW_STEPS}
    run = ok(run_worker(tmp_path, 1, env={"SCALELAB_PEAK_TFLOPS": "0.5"}, **fields))
    (probe,) = run.of_kind("compute")
    (epoch,) = run.of_kind("epoch")
    assert probe.operator_peak_tflops == 0.5
    assert epoch.mfu == pytest.approx(epoch.model_tflops_per_s / 0.5)
    # Checkpointing recomputes mlp's every layer: one forward more in the hardware's count, none in the model's.
    assert epoch.hardware_flops_per_sample == pytest.approx(epoch.model_flops_per_sample * 4 / 3)


def test_ddp_reports_its_communication_time(tmp_path):
    run = ok(run_worker(tmp_path, 2, model="mlp", strategy="ddp", **FEW_STEPS))
    (epoch,) = run.of_kind("epoch")
    assert 0 < epoch.comm_time_s < 10 * epoch.epoch_time_s


@pytest.mark.parametrize("model", ["mlp", "cnn", "resnet18", "gpt"])
def test_checkpointing_leaves_parameter_names_as_they_are(model):
    # A checkpoint saved with activation checkpointing on loads with it off, and for inference.
    from worker.models import model_spec
    from worker.parallel.ac import apply_ac

    spec = RunSpec(model=model, dataset="synthetic", strategy="single")
    plain = build(spec, data.load(spec, rank=0))
    names = list(plain.state_dict())
    checkpointed = apply_ac(build(spec, data.load(spec, rank=0)), model_spec(spec.model))
    assert list(checkpointed.state_dict()) == names
    checkpointed.load_state_dict(plain.state_dict())


def test_checkpointed_batch_norms_update_their_statistics_once_per_step():
    import torch

    from worker.models import resnet18
    from worker.parallel.ac import apply_ac

    spec = RunSpec(model="resnet18", dataset="synthetic", strategy="single")
    bundle = data.load(spec, rank=0)
    torch.manual_seed(0)
    plain = build(spec, bundle)
    checkpointed = apply_ac(copy.deepcopy(plain), resnet18.SPEC)
    inputs = torch.randn(4, *bundle.sample_shape)
    for model in (plain, checkpointed):
        model.train()
        model(inputs).sum().backward()
    for (name, before), after in zip(plain.state_dict().items(), checkpointed.state_dict().values(), strict=True):
        assert torch.equal(before, after) or torch.allclose(before, after, atol=1e-6), name
