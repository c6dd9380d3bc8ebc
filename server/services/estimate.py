"""Memory per GPU of one run, estimated from its spec alone, for the submission preview.

Torch-free: the server runs where torch is not installed, so this module mirrors the worker's models, data sets
and strategies by arithmetic. It reads each model's hyperparameters and structure (which layers tensor parallelism
splits, resnet's stages, the rules a tensor-parallel degree must meet) and each data set's shape and size from
contract.configs, as the worker does; the tests check the parameter counts, the units and the data bytes against
the real modules and their specs.

What one GPU holds, in bytes:

- parameters: 4 per parameter it holds. Autocast (bf16, fp16) keeps fp32 master weights.
- gradients: 4 per parameter it holds. FSDP skips the reduce-scatter on accumulation microsteps, so with
  grad_accum_steps > 1 it keeps the unsharded gradients as well.
- optimizer state: 4 per parameter it holds: SGD's momentum buffer (worker/train.py uses momentum 0.9).
- activations: what backward keeps, counted per sample layer by layer (module docstrings below), times the
  micro-batch (global batch / data-parallel degree / grad_accum_steps; for pp, one pipeline microbatch times the
  microbatches in flight). Elements are in the compute dtype (2 bytes under autocast) except the data's inputs,
  gpt's residual stream and layer-norm statistics and the loss, which stay fp32, and index tensors (8 bytes).
  Activation checkpointing keeps only each checkpointed unit's output, plus one unit recomputed in backward.
- buffers: DDP's gradient buckets (one more gradient copy: the worker keeps gradient_as_bucket_view off); FSDP's
  unsharded parameters while gathered: the root's own (FSDP never reshards the root after forward) and the two
  largest sharded units (the running one and the prefetched one), in fp32 since the worker sets no
  mixed-precision policy; under autocast, the low-precision copies of Linear/Conv weights that backward keeps.
- data: the worker moves the whole data set, training and validation, to every GPU.

Not counted: the CUDA context and the caching allocator's slack (together often 0.5-1 GiB), temporaries that
live inside one operation, evaluation (no gradients, so smaller), and torch.compile's own buffers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from contract.layers import FP32, LOW, LayoutError, parameter_count
from contract.layers import NONE as _NONE
from contract.layers import Acts as _Acts
from contract.layers import Unit as _Unit
from contract.layers import data_set as _data
from contract.layers import pipeline_stage as _stage
from contract.layers import units as _units
from contract.spec import FsdpSharding, Model, PipelineSchedule, Precision, RunSpec, Strategy
from server.models import MemoryEstimate

GIB = 2**30
# The layout the worker would refuse, raised by the layer count (contract.layers) under the name callers know.
EstimateError = LayoutError
__all__ = ["GIB", "EstimateError", "estimate_memory", "fits", "parameter_count"]


def _activations(units: list[_Unit], received: _Acts, checkpointing: bool) -> tuple[_Acts, _Acts]:
    """Per sample: what each microbatch in flight keeps, and what recomputing one checkpointed unit adds."""
    kept = received
    recompute = _NONE
    for unit in units:
        if checkpointing and unit.checkpointed:
            kept += unit.out
            inner = unit.kept - unit.out
            if inner.bytes(False) > recompute.bytes(False):
                recompute = inner
        else:
            kept += unit.kept
    return kept, recompute


@dataclass(frozen=True)
class _Layout:
    """How the spec's strategy places the model on one GPU."""

    shard: int  # FSDP shard group size; 0 without FSDP
    buckets: bool  # DDP's gradient buckets
    describe: str


def _layout(spec: RunSpec) -> _Layout:
    dp, tp = spec.dp_degree, spec.tp
    if spec.strategy is Strategy.ddp:
        return _Layout(0, True, f"ddp over {dp} GPUs: a full replica each, plus gradient buckets")
    if spec.strategy is Strategy.fsdp:
        hybrid = spec.fsdp_sharding is FsdpSharding.hybrid
        ways = spec.gpus_per_node if hybrid else spec.gpus
        where = f"in each of {spec.nodes} nodes" if hybrid else "over all GPUs"
        return _Layout(ways, False, f"fsdp {spec.fsdp_sharding.value}: sharded {ways} ways {where}")
    if spec.strategy is Strategy.fsdp_tp:
        return _Layout(dp, False, f"fsdp_tp: parallel layers split {tp} ways, then sharded {dp} ways")
    if spec.strategy is Strategy.tp:
        return _Layout(0, False, f"tp: parallel layers split {tp} ways")
    if spec.strategy is Strategy.pp:
        return _Layout(0, False, "pp")
    return _Layout(0, False, "single GPU")


def _precision(spec: RunSpec) -> str:
    if spec.precision is Precision.fp32:
        return "fp32"
    return f"{spec.precision.value} autocast (fp32 master weights, {spec.precision.value} activations)"


@dataclass(frozen=True)
class _Stage:
    index: int | None
    parts: dict[str, float]
    in_flight: int


def _estimate_stage(
    spec: RunSpec, units: list[_Unit], received: _Acts, index: int | None, micro_batch: int, data: int
) -> _Stage:
    layout = _layout(spec)
    autocast = spec.precision is not Precision.fp32
    params = [p for unit in units for p in unit.params]
    held = sum(p.numel for p in params)
    local = sum(p.shard(layout.shard) for p in params) if layout.shard else held
    gradients = local
    buffers = 0.0
    if layout.shard:
        if spec.grad_accum_steps > 1:
            gradients += held  # accumulated unsharded between the reduce-scatters
        sizes = sorted(unit.numel for unit in units if unit.fsdp_unit)
        root = held - sum(sizes)
        buffers += FP32 * (root + sum(sizes[-2:]))
    if layout.buckets:
        buffers += FP32 * held
    if autocast:
        buffers += LOW * sum(p.numel for p in params if p.matmul)

    kept, recompute = _activations(units, received, spec.activation_checkpointing)
    in_flight = 1
    outputs = 0.0
    if spec.strategy is Strategy.pp and index is not None:
        stages = spec.pp
        in_flight = (
            spec.microbatches if spec.pp_schedule is PipelineSchedule.gpipe else min(spec.microbatches, stages - index)
        )
        if index == stages - 1:
            # The schedule keeps every microbatch's output of the step to return them merged.
            outputs = units[-1].out.bytes(autocast) * (spec.global_batch_size // spec.grad_accum_steps)
    activations = (kept.bytes(autocast) * in_flight + recompute.bytes(autocast)) * micro_batch + outputs
    parts = {
        "parameters": FP32 * local,
        "gradients": FP32 * gradients,
        "optimizer": FP32 * local,
        "activations": activations,
        "buffers": buffers,
        "data": data,
    }
    return _Stage(index, parts, in_flight)


def estimate_memory(spec: RunSpec) -> MemoryEstimate:
    """Bytes per GPU for the spec's model, data set, strategy, precision and batch; raises EstimateError for a
    layout the worker would refuse (tensor degree not dividing heads or width, more stages than layers)."""
    data = _data(spec)
    count = parameter_count(spec)
    units = _units(spec, spec.tp)
    if spec.strategy is Strategy.pp:
        micro_batch = spec.global_batch_size // spec.grad_accum_steps // spec.microbatches
        stages = [
            _estimate_stage(spec, *_stage(units, s, spec.pp, spec.model), s, micro_batch, data.bytes)
            for s in range(spec.pp)
        ]
        chosen = max(stages, key=lambda stage: sum(stage.parts.values()))
        where = (
            f"pp stage {chosen.index} of {spec.pp} (the largest), {chosen.in_flight} of {spec.microbatches} "
            f"microbatches in flight ({spec.pp_schedule.value})"
        )
    else:
        micro_batch = spec.global_batch_size // (spec.dp_degree * spec.grad_accum_steps)
        chosen = _estimate_stage(spec, units, _NONE, None, micro_batch, data.bytes)
        where = _layout(spec).describe
    sample = f" x {data.sample_shape[0]} tokens" if spec.model is Model.gpt else ""
    checkpointing = ", checkpointed" if spec.activation_checkpointing else ""
    basis = (
        f"{spec.model.value} on {spec.dataset.value}, {count:,} parameters; {where}; micro-batch {micro_batch}"
        f"{sample}; {_precision(spec)}; SGD momentum; activations{checkpointing} counted analytically per layer, "
        "not measured; CUDA context and allocator slack not included"
    )
    parts = {name: math.ceil(value) for name, value in chosen.parts.items()}
    return MemoryEstimate(
        parameter_count=count,
        micro_batch=micro_batch,
        parameters_bytes=parts["parameters"],
        gradients_bytes=parts["gradients"],
        optimizer_state_bytes=parts["optimizer"],
        activations_bytes=parts["activations"],
        buffers_bytes=parts["buffers"],
        data_bytes=parts["data"],
        total_bytes=sum(parts.values()),
        pipeline_stage=chosen.index,
        basis=basis,
    )


_REMEDIES = {
    "parameters_bytes": "shard them (fsdp) or split the model (tp, pp)",
    "gradients_bytes": "shard them (fsdp) or split the model (tp, pp)",
    "optimizer_state_bytes": "shard them (fsdp) or split the model (tp, pp)",
    "activations_bytes": "turn on activation_checkpointing, or lower the micro-batch (more GPUs or grad_accum_steps)",
    "buffers_bytes": "fsdp gathers whole units: a smaller model or more units",
    "data_bytes": "the worker keeps the whole data set on every GPU",
}


def fits(estimate: MemoryEstimate, gpu_memory_gib: float | None) -> str | None:
    """A warning when the estimate exceeds one GPU's memory; None when it fits or the memory is unknown."""
    if gpu_memory_gib is None or estimate.total_bytes <= gpu_memory_gib * GIB:
        return None
    largest = max(_REMEDIES, key=lambda name: int(getattr(estimate, name)))
    share = int(getattr(estimate, largest))
    part = largest.removesuffix("_bytes").replace("_", " ")
    return (
        f"estimated {estimate.total_bytes / GIB:.2f} GiB per GPU exceeds the partition's {gpu_memory_gib:g} GiB; "
        f"the largest part is {part} ({share / GIB:.2f} GiB): {_REMEDIES[largest]}"
    )
