"""The memory estimate: its arithmetic per strategy, and its mirror of the worker checked against the real models."""

from __future__ import annotations

from typing import Any

import pytest

from contract.layers import pipeline_stage as _stage
from contract.layers import units as _units
from contract.spec import DATASETS_BY_MODEL, STRATEGIES_BY_MODEL, Precision, RunSpec, Strategy
from server.models import MemoryEstimate
from server.services.estimate import (
    GIB,
    EstimateError,
    estimate_memory,
    fits,
    parameter_count,
)
from tests.factories import spec

W = 128  # gpt's default width
GPT_BLOCK = 12 * W * W + 13 * W  # ln1, q, k, v, proj, ln2, fc, proj
# What tensor parallelism splits in a block: q, k, v and fc whole, the two row-parallel weights without their biases.
GPT_BLOCK_SPLIT = 12 * W * W + 7 * W


def size_id(fields: dict[str, Any]) -> str:
    return "-".join(str(value) for value in fields.values())


def state(estimate: MemoryEstimate) -> int:
    """Parameters, gradients and optimizer state: what the data-parallel strategies shard or replicate."""
    return estimate.parameters_bytes + estimate.gradients_bytes + estimate.optimizer_state_bytes


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"model": "mlp"}, 76_810),
        ({"model": "cnn"}, 620_586),
        ({"model": "resnet18"}, 11_173_962),
        ({"model": "gpt"}, 817_984),
        ({"model": "gpt", "dataset": "text"}, 825_951),
    ],
)
def test_default_parameter_counts(fields, expected):
    assert parameter_count(spec(**fields)) == expected
    assert estimate_memory(spec(**fields)).parameter_count == expected


def test_single_gpu_holds_parameters_gradients_and_momentum_in_fp32():
    estimate = estimate_memory(spec(model="mlp", strategy="single"))
    assert estimate.parameters_bytes == estimate.gradients_bytes == estimate.optimizer_state_bytes == 4 * 76_810
    assert estimate.buffers_bytes == 0
    assert estimate.micro_batch == 64
    assert estimate.total_bytes == (
        state(estimate) + estimate.activations_bytes + estimate.buffers_bytes + estimate.data_bytes
    )
    assert estimate.pipeline_stage is None


def test_ddp_replicates_everything_and_adds_one_gradient_copy_for_its_buckets():
    single = estimate_memory(spec(model="gpt", strategy="single"))
    ddp = estimate_memory(spec(model="gpt", strategy="ddp", gpus=4, global_batch_size=256))
    assert state(ddp) == state(single)
    assert ddp.buffers_bytes == ddp.gradients_bytes
    # The same samples per GPU as one GPU with a quarter of the batch.
    assert ddp.micro_batch == single.micro_batch
    assert ddp.activations_bytes == single.activations_bytes


@pytest.mark.parametrize("model", ["gpt", "resnet18", "mlp"])
def test_fsdp_on_four_gpus_holds_a_quarter_of_ddps_state(model):
    ddp = estimate_memory(spec(model=model, strategy="ddp", gpus=4))
    fsdp = estimate_memory(spec(model=model, strategy="fsdp", gpus=4))
    # Shards are padded to equal chunks of each parameter's first dimension (mlp's 10-class head: 3 rows each).
    assert state(fsdp) == pytest.approx(state(ddp) / 4, rel=0.01)
    assert fsdp.activations_bytes == ddp.activations_bytes


def test_fsdp_gathers_the_root_and_two_blocks_at_a_time():
    depth = 6
    count = parameter_count(spec(model="gpt", depth=depth))
    fsdp = estimate_memory(spec(model="gpt", strategy="fsdp", gpus=4, depth=depth))
    root = count - depth * GPT_BLOCK  # embeddings, final norm and head: never resharded after forward
    assert fsdp.buffers_bytes == 4 * (root + 2 * GPT_BLOCK)
    assert fsdp.parameters_bytes == count  # 4 bytes over 4 ways: divides evenly at gpt's sizes


def test_fsdp_without_units_gathers_the_whole_model():
    """mlp and cnn are one FSDP unit: sharding saves their gradients and momentum, not the gathered weights."""
    fsdp = estimate_memory(spec(model="cnn", strategy="fsdp", gpus=4))
    assert fsdp.buffers_bytes == 4 * 620_586


def test_hybrid_fsdp_shards_within_a_node_only():
    full = estimate_memory(spec(model="gpt", strategy="fsdp", gpus=8, nodes=2))
    hybrid = estimate_memory(spec(model="gpt", strategy="fsdp", gpus=8, nodes=2, fsdp_sharding="hybrid"))
    assert hybrid.parameters_bytes == 2 * full.parameters_bytes
    assert "sharded 4 ways in each of 2 nodes" in hybrid.basis


def test_fsdp_accumulating_gradients_keeps_them_unsharded_between_reductions():
    one = estimate_memory(spec(model="gpt", strategy="fsdp", gpus=4, global_batch_size=64))
    two = estimate_memory(spec(model="gpt", strategy="fsdp", gpus=4, global_batch_size=64, grad_accum_steps=2))
    assert two.gradients_bytes == one.gradients_bytes + 4 * 817_984
    assert two.parameters_bytes == one.parameters_bytes
    assert two.micro_batch == one.micro_batch // 2 == 8


def test_tp_on_two_gpus_halves_the_parallel_layers_only():
    count = 817_984
    tp = estimate_memory(spec(model="gpt", strategy="tp", gpus=2))
    assert tp.parameters_bytes == 4 * (count - 4 * GPT_BLOCK_SPLIT // 2)
    single = estimate_memory(spec(model="gpt", strategy="single"))
    # The residual stream, layer norms and logits stay whole on every rank; the rest halves.
    assert single.activations_bytes / 2 < tp.activations_bytes < single.activations_bytes
    # Tensor parallelism reads the same samples on both ranks.
    assert tp.micro_batch == single.micro_batch


def test_tp_splits_the_mlps_first_pair_of_layers():
    features, width = 32, 256  # synthetic vectors, default width
    tp = estimate_memory(spec(model="mlp", strategy="tp", gpus=2))
    # Column-parallel first layer (weight and bias), row-parallel second (weight only); the head stays whole.
    split = features * width + width + width * width
    assert tp.parameters_bytes == 4 * (76_810 - split // 2)


def test_fsdp_tp_splits_then_shards():
    tp = estimate_memory(spec(model="gpt", strategy="tp", gpus=2))
    both = estimate_memory(spec(model="gpt", strategy="fsdp_tp", gpus=8, tp_degree=2, global_batch_size=64))
    assert both.parameters_bytes == tp.parameters_bytes // 4
    assert both.micro_batch == 64 // 4


def test_pp_estimates_the_largest_stage():
    # gpt with 4 blocks on 2 stages: the embeddings go with the first, the norm and head with the last.
    first_stage = 64 * W + 64 * W + 2 * GPT_BLOCK
    pp = estimate_memory(spec(model="gpt", strategy="pp", gpus=2, pp_schedule="1f1b"))
    assert pp.pipeline_stage == 0  # the heavier embeddings, and two microbatches in flight against one
    assert pp.parameters_bytes == 4 * first_stage
    assert pp.micro_batch == 64 // 4
    assert "pp stage 0 of 2" in pp.basis


def test_gpipe_keeps_all_microbatches_in_flight_and_1f1b_at_most_the_stages():
    fields: dict[str, Any] = {"model": "mlp", "strategy": "pp", "gpus": 2, "depth": 3, "microbatches": 8}
    gpipe = estimate_memory(spec(**fields, pp_schedule="gpipe"))
    one_f_one_b = estimate_memory(spec(**fields, pp_schedule="1f1b"))
    assert gpipe.pipeline_stage == one_f_one_b.pipeline_stage == 0
    assert "8 of 8 microbatches" in gpipe.basis
    assert "2 of 8 microbatches" in one_f_one_b.basis
    assert gpipe.activations_bytes == 4 * one_f_one_b.activations_bytes


def test_pp_refuses_more_stages_than_the_model_has_blocks():
    with pytest.raises(EstimateError, match="gpt has 4 blocks: too few for 8 pipeline stages"):
        estimate_memory(spec(model="gpt", strategy="pp", gpus=8))


def test_tp_refuses_a_degree_that_does_not_divide_the_heads():
    with pytest.raises(EstimateError, match="4 attention heads, which do not split over 8"):
        estimate_memory(spec(model="gpt", strategy="tp", gpus=8))


@pytest.mark.parametrize("fields", [{"model": "mlp", "depth": 4, "width": 1024}, {"model": "resnet18"}], ids=size_id)
def test_bf16_activations_are_half_of_fp32(fields):
    fp32 = estimate_memory(spec(**fields, strategy="single"))
    bf16 = estimate_memory(spec(**fields, strategy="single", precision="bf16"))
    # All but the fp32 data batch and loss, which are small beside the layers' outputs (not so in the default mlp).
    assert bf16.activations_bytes == pytest.approx(fp32.activations_bytes / 2, rel=0.06)
    # Master weights stay fp32; backward keeps bf16 copies of the weights.
    assert state(bf16) == state(fp32)
    assert bf16.buffers_bytes > fp32.buffers_bytes == 0


def test_max_pool_indices_stay_int64_under_autocast():
    fp32 = estimate_memory(spec(model="cnn", strategy="single"))
    bf16 = estimate_memory(spec(model="cnn", strategy="single", precision="bf16"))
    indices = 64 * 8 * (32 * 16 * 16 + 64 * 8 * 8 + 128 * 4 * 4)  # batch x bytes x pooled outputs per stage
    # The rest halves, but for the fp32 input batch and its bf16 copy.
    assert bf16.activations_bytes - indices == pytest.approx((fp32.activations_bytes - indices) / 2, rel=0.06)


def test_gpt_keeps_its_residual_stream_in_fp32_under_autocast():
    fp32 = estimate_memory(spec(model="gpt"))
    fp16 = estimate_memory(spec(model="gpt", precision="fp16"))
    assert 0.5 * fp32.activations_bytes < fp16.activations_bytes < 0.75 * fp32.activations_bytes


@pytest.mark.parametrize(
    ("fields", "at_most"),
    [
        ({"model": "gpt", "depth": 8}, 0.2),
        # Its first stage, recomputed whole in backward, holds about half of all its activations.
        ({"model": "resnet18"}, 0.65),
    ],
    ids=["gpt", "resnet18"],
)
def test_activation_checkpointing_keeps_only_the_units_outputs(fields, at_most):
    plain = estimate_memory(spec(**fields))
    checkpointed = estimate_memory(spec(**fields, activation_checkpointing=True))
    assert checkpointed.activations_bytes < at_most * plain.activations_bytes
    assert "activations, checkpointed" in checkpointed.basis


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_checkpointing_single_layers_frees_nothing(model):
    """The worker checkpoints each weighted layer of a sequential model alone, and a Linear or Conv keeps only
    its input, which the layer before keeps anyway."""
    plain = estimate_memory(spec(model=model))
    checkpointed = estimate_memory(spec(model=model, activation_checkpointing=True))
    assert checkpointed.activations_bytes == plain.activations_bytes


def test_activations_scale_with_the_micro_batch():
    whole = estimate_memory(spec(model="cnn", global_batch_size=64))
    accumulated = estimate_memory(spec(model="cnn", global_batch_size=64, grad_accum_steps=4))
    assert accumulated.micro_batch == 16
    assert accumulated.activations_bytes == whole.activations_bytes // 4


def test_gpt_activations_grow_with_context_and_width():
    base = estimate_memory(spec(model="gpt")).activations_bytes
    assert estimate_memory(spec(model="gpt", context=128)).activations_bytes == pytest.approx(2 * base, rel=0.02)
    assert estimate_memory(spec(model="gpt", width=256)).activations_bytes == pytest.approx(2 * base, rel=0.05)


def test_cifar10_lives_whole_on_every_gpu():
    estimate = estimate_memory(spec(model="resnet18", dataset="cifar10", strategy="ddp", gpus=8))
    assert estimate.data_bytes == 60_000 * (3 * 32 * 32 * 4 + 8)


def combinations() -> list[RunSpec]:
    """In the same order in every process (the sets' own order changes with the string hash's seed): pytest-xdist's
    workers must collect the same tests."""
    found = []
    for model, strategies in STRATEGIES_BY_MODEL.items():
        for strategy in sorted(strategies):
            for precision in Precision:
                if strategy is Strategy.pp and precision is Precision.fp16:
                    continue
                gpus = 1 if strategy is Strategy.single else 2
                tp_degree = 2 if strategy is Strategy.fsdp_tp else None
                for dataset in sorted(DATASETS_BY_MODEL[model]):
                    found.append(
                        spec(
                            model=model,
                            dataset=dataset,
                            strategy=strategy,
                            gpus=gpus,
                            tp_degree=tp_degree,
                            precision=precision,
                        )
                    )
    return found


@pytest.mark.parametrize("run", combinations(), ids=lambda s: f"{s.model}-{s.dataset}-{s.strategy}-{s.precision}")
def test_every_model_strategy_and_precision_has_an_estimate(run):
    estimate = estimate_memory(run)
    assert estimate.total_bytes > 0
    assert all(
        part >= 0 for part in (state(estimate), estimate.activations_bytes, estimate.buffers_bytes, estimate.data_bytes)
    )
    assert "\n" not in estimate.basis
    assert estimate.basis.startswith(f"{run.model.value} on {run.dataset.value}")


def test_fits_says_nothing_when_it_fits_or_the_memory_is_unknown():
    estimate = estimate_memory(spec(model="gpt"))
    assert fits(estimate, 80) is None
    assert fits(estimate, None) is None
    assert fits(estimate, estimate.total_bytes / GIB) is None


def test_fits_warns_and_names_the_largest_part():
    estimate = estimate_memory(spec(model="gpt", context=2048, width=1024, heads=16, global_batch_size=64))
    warning = fits(estimate, 16)
    assert warning is not None
    assert warning.startswith(f"estimated {estimate.total_bytes / GIB:.2f} GiB per GPU exceeds the partition's 16 GiB")
    assert "activations" in warning
    assert "activation_checkpointing" in warning


# Against the worker itself: needs torch.

# Non-default sizes as well as the defaults.
SIZES: list[dict[str, Any]] = [
    {"model": "mlp", "depth": 1, "width": 32},
    {"model": "mlp", "depth": 5, "width": 96},
    {"model": "gpt", "depth": 2, "width": 96, "heads": 3, "context": 32},
    {"model": "gpt", "dataset": "text", "depth": 3, "width": 64, "heads": 8, "context": 16},
]
PAIRS = [{"model": m.value, "dataset": d.value} for m, sets in DATASETS_BY_MODEL.items() for d in sorted(sets)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The worker's own model for a spec, on the data set's real shape; CIFAR-10 from a small archive."""
    pytest.importorskip("torch")
    import torch

    from tests.worker.cifar_fixture import write_cifar10
    from worker import data, models
    from worker.datasets import cifar10

    root = tmp_path_factory.mktemp("data")
    write_cifar10(root)

    def build(run: RunSpec) -> tuple[Any, Any]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(cifar10.DATA_DIR_ENV, str(root))
            bundle = data.load(run, rank=0)
        torch.manual_seed(0)
        return models.build(run, bundle), bundle

    return build


@pytest.mark.torch
@pytest.mark.parametrize("fields", PAIRS + SIZES, ids=size_id)
def test_parameter_count_equals_the_real_models(built, fields):
    run = spec(**fields)
    model, _ = built(run)
    assert parameter_count(run) == sum(p.numel() for p in model.parameters())


@pytest.mark.torch
@pytest.mark.parametrize("dataset", ["synthetic", "digits", "text"])
def test_data_bytes_equal_the_loaded_data_sets(built, dataset):
    run = spec(model="gpt" if dataset == "text" else "mlp", dataset=dataset)
    _, bundle = built(run)
    tensors = (bundle.train.inputs, bundle.train.targets, bundle.val.inputs, bundle.val.targets)
    assert estimate_memory(run).data_bytes == sum(t.numel() * t.element_size() for t in tensors)


def units_params(units: list[Any]) -> int:
    return sum(unit.numel for unit in units)


@pytest.mark.torch
@pytest.mark.parametrize(
    ("fields", "stages"),
    [
        ({"model": "mlp", "depth": 4}, 2),
        ({"model": "mlp", "depth": 4}, 3),
        ({"model": "cnn"}, 3),
        ({"model": "gpt"}, 3),
    ],
    ids=["mlp-2", "mlp-3", "cnn-3", "gpt-3"],
)
def test_pipeline_stages_hold_what_the_workers_cut_holds(built, fields, stages):
    import copy

    from worker.models import model_spec
    from worker.parallel.pp import cut_stage

    run = spec(**fields)
    model, _ = built(run)
    units = _units(run)
    for index in range(stages):
        cut = cut_stage(copy.deepcopy(model), model_spec(run.model), index, stages)
        stage_units, _ = _stage(units, index, stages, run.model)
        assert units_params(stage_units) == sum(p.numel() for p in cut.parameters()), index


@pytest.mark.torch
@pytest.mark.parametrize("model", ["gpt", "resnet18"])
def test_fsdp_and_checkpointing_units_are_the_workers(built, model):
    import copy

    from worker.models import model_spec
    from worker.parallel.ac import apply_ac, is_checkpointed

    run = spec(model=model)
    real, _ = built(run)
    units = _units(run)
    plan = model_spec(run.model)
    assert [u.numel for u in units if u.fsdp_unit] == [
        sum(p.numel() for p in unit.parameters()) for unit in plan.fsdp_units(real)
    ]
    wrapped = [m for m in apply_ac(copy.deepcopy(real), plan).modules() if is_checkpointed(m)]
    assert [u.numel for u in units if u.checkpointed] == [sum(p.numel() for p in m.parameters()) for m in wrapped]


def saved_for_backward(model: Any, inputs: Any, targets: Any, autocast: bool) -> int:
    """Bytes of the tensors autograd keeps for backward in one training forward, each storage once."""
    import torch

    from worker.train import loss_fn

    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    with (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor),
        torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast),
    ):
        loss_fn(model(inputs), targets)
    return sum(kept.values())


@pytest.mark.torch
@pytest.mark.parametrize(
    "fields",
    [
        {"model": "mlp", "global_batch_size": 8},
        {"model": "cnn", "global_batch_size": 4},
        {"model": "resnet18", "global_batch_size": 2},
        {"model": "gpt", "global_batch_size": 2},
        {"model": "gpt", "global_batch_size": 2, "depth": 2, "width": 64, "heads": 2, "context": 32},
    ],
    ids=size_id,
)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_activation_count_is_close_to_what_autograd_keeps(built, fields, precision):
    """A coarse check of the analytical count on CPU, where autocast casts much as it does on CUDA.

    Under autocast, autograd also keeps the weights' low-precision copies, which the estimate counts in buffers.
    """
    import torch

    run = spec(strategy="single", precision=precision, **fields)
    model, bundle = built(run)
    batch = torch.arange(run.global_batch_size)
    measured = saved_for_backward(
        model.train(), bundle.train.inputs[batch], bundle.train.targets[batch], precision == "bf16"
    )
    estimate = estimate_memory(run)
    assert estimate.activations_bytes + estimate.buffers_bytes == pytest.approx(measured, rel=0.15)
