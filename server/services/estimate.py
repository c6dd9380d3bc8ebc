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
from collections.abc import Callable
from dataclasses import dataclass

from contract import configs
from contract.spec import Dataset, FsdpSharding, Model, PipelineSchedule, Precision, RunSpec, Strategy
from contract.splits import even_groups
from server.models import MemoryEstimate

GIB = 2**30
FP32 = 4
LOW = 2  # bf16 and fp16
INDEX = 8  # int64


class EstimateError(ValueError):
    """The spec passes validation but the worker would refuse its layout (the worker raises the same)."""


@dataclass(frozen=True)
class _Acts:
    """Activation elements per sample, by the bytes each takes."""

    low: float = 0.0  # compute dtype: 4 bytes in fp32, 2 under autocast
    fp32: float = 0.0  # fp32 whatever the precision
    index: float = 0.0  # int64
    cast: float = 0.0  # extra copies only autocast makes (of fp32 tensors fed to matrix products)

    def __add__(self, other: _Acts) -> _Acts:
        return _Acts(self.low + other.low, self.fp32 + other.fp32, self.index + other.index, self.cast + other.cast)

    def __sub__(self, other: _Acts) -> _Acts:
        return _Acts(self.low - other.low, self.fp32 - other.fp32, self.index - other.index, self.cast - other.cast)

    def bytes(self, autocast: bool) -> float:
        low = LOW if autocast else FP32
        return self.low * low + self.fp32 * FP32 + self.index * INDEX + (self.cast * LOW if autocast else 0.0)


_NONE = _Acts()


@dataclass(frozen=True)
class _Param:
    shape: tuple[int, ...]  # as one rank holds it after tensor parallelism
    matmul: bool = False  # a Linear or Conv weight: autocast makes a low-precision copy that backward keeps

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def shard(self, ways: int) -> int:
        """Elements of this rank's FSDP shard: dim 0 split `ways` ways, padded to equal chunks."""
        return -(-self.shape[0] // ways) * math.prod(self.shape[1:])


@dataclass(frozen=True)
class _Unit:
    """A module of the model, in forward order."""

    name: str
    params: tuple[_Param, ...] = ()
    # Kept for backward per sample, counting its own output where a later layer keeps it, never its input.
    kept: _Acts = _NONE
    # Its output per sample: what a pipeline stage boundary sends on and the next stage keeps.
    out: _Acts = _NONE
    # What the model's spec (worker/models/<name>.py) says of the module:
    cut_before: bool = False  # a pipeline stage may start here (its pipeline_stage)
    checkpointed: bool = False  # recomputed in backward under activation checkpointing (its checkpoint_units)
    fsdp_unit: bool = False  # sharded on its own (its fsdp_units); otherwise part of the root

    @property
    def numel(self) -> int:
        return sum(p.numel for p in self.params)


@dataclass(frozen=True)
class _Data:
    sample_shape: tuple[int, ...]
    classes: int  # or the vocabulary
    bytes: int  # training and validation sets, inputs and targets


def _classified(shape: tuple[int, ...], samples: tuple[int, int]) -> _Data:
    count = sum(samples)
    return _Data(shape, configs.CLASSES, count * math.prod(shape) * FP32 + count * INDEX)


def _data(spec: RunSpec) -> _Data:
    """The shape the model reads (contract.configs.data_shape) and the bytes of the data set, as worker/datasets/
    loads them."""
    shape = configs.data_shape(spec)
    if spec.dataset is Dataset.text:
        context = shape.sample_shape[0]
        train_chars = int(configs.TEXT_MAX_CHARS * configs.TEXT_TRAIN_FRACTION)
        windows = (train_chars - 1) // context + (configs.TEXT_MAX_CHARS - train_chars - 1) // context
        return _Data(shape.sample_shape, shape.classes, 2 * windows * context * INDEX)
    if spec.dataset is Dataset.digits:
        return _classified(shape.sample_shape, configs.DIGITS_SAMPLES)
    if spec.dataset is Dataset.cifar10:
        return _classified(shape.sample_shape, configs.CIFAR10_SAMPLES)
    # synthetic
    if spec.model is Model.gpt:
        context = shape.sample_shape[0]
        return _Data(shape.sample_shape, shape.classes, 2 * sum(configs.SYNTHETIC_SEQUENCES) * context * INDEX)
    if spec.model is Model.mlp:
        return _classified(shape.sample_shape, configs.SYNTHETIC_VECTORS)
    return _classified(shape.sample_shape, configs.SYNTHETIC_IMAGES)


def _linear(n_in: int, n_out: int, split: configs.Split | None = None, tp: int = 1) -> tuple[_Param, _Param]:
    """Weight and bias as one rank holds them: column-parallel splits both, row-parallel the weight only."""
    if split == "column":
        return _Param((n_out // tp, n_in), True), _Param((n_out // tp,))
    if split == "row":
        return _Param((n_out, n_in // tp), True), _Param((n_out,))
    return _Param((n_out, n_in), True), _Param((n_out,))


def _loss(classes: float) -> _Acts:
    # cross_entropy in fp32: log-softmax keeps its output, and backward starts with a gradient as large.
    return _Acts(fp32=2 * classes)


def _mlp(spec: RunSpec, data: _Data, tp: int) -> list[_Unit]:
    """Flatten, then Linear/ReLU pairs: ReLU keeps its output, which the next Linear keeps as its input.

    Per sample: input features (fp32) + depth x width (/tp where a column-parallel layer split it) + the loss.
    Checkpointing each Linear alone, as the worker does for a sequential model, frees nothing: a Linear keeps
    only its input, and that input is the ReLU's kept output.
    """
    config = configs.MlpConfig.of(spec)
    depth, width = config.depth, config.width
    features = math.prod(data.sample_shape)
    sizes = [features, *[width] * depth, data.classes]
    linears = depth + 1
    # The worker's plan (worker/models/mlp.py): the Linear layers in column/row pairs; an unpaired last layer whole.
    splits = configs.paired_splits(linears) if tp > 1 else [None] * linears
    if tp > 1 and (why := configs.why_width_does_not_split(width, tp)):
        raise EstimateError(why)
    units = [_Unit("flatten", kept=_Acts(fp32=features, cast=features), out=_Acts(fp32=features))]
    for i, split in enumerate(splits):
        n_out = sizes[i + 1] // tp if split == "column" else sizes[i + 1]
        params = _linear(sizes[i], sizes[i + 1], split, tp)
        if i == linears - 1:
            units.append(_Unit(f"linear{i}", params, _loss(n_out), _Acts(low=n_out), cut_before=True))
        else:
            units.append(_Unit(f"linear{i}", params, out=_Acts(low=n_out), cut_before=True))
            units.append(_Unit(f"relu{i}", kept=_Acts(low=n_out), out=_Acts(low=n_out)))
    return units


def _cnn(spec: RunSpec, data: _Data, tp: int) -> list[_Unit]:
    """Per stage: the conv's output (batch norm keeps it), the ReLU's output, and max-pool's int64 indices and
    output (the next layer keeps it); then the head. Checkpointing each conv alone frees nothing, as in mlp."""
    config = configs.CnnConfig.of(spec)
    pixels = math.prod(config.input_shape)
    units = [_Unit("input", kept=_Acts(fp32=pixels, cast=pixels), out=_Acts(fp32=pixels))]
    channels, side = config.input_shape[0], config.input_shape[1]
    for out in config.channels:
        full, pooled = out * side * side, out * (side // 2) ** 2
        units += [
            _Unit("conv", (_Param((out, channels, 3, 3), True),), _Acts(low=full), _Acts(low=full), cut_before=True),
            _Unit("norm", (_Param((out,)), _Param((out,))), out=_Acts(low=full), cut_before=True),
            _Unit("relu", kept=_Acts(low=full), out=_Acts(low=full)),
            _Unit("pool", kept=_Acts(low=pooled, index=pooled), out=_Acts(low=pooled)),
        ]
        channels, side = out, side // 2
    flat, hidden = channels * side * side, config.hidden
    units += [
        _Unit("flatten", out=_Acts(low=flat)),
        _Unit("fc", _linear(flat, hidden), out=_Acts(low=hidden), cut_before=True),
        _Unit("relu", kept=_Acts(low=hidden), out=_Acts(low=hidden)),
        _Unit("head", _linear(hidden, data.classes), _loss(data.classes), _Acts(low=data.classes), cut_before=True),
    ]
    return units


def _norm(channels: int) -> tuple[_Param, _Param]:
    return _Param((channels,)), _Param((channels,))


def _resnet18(spec: RunSpec, data: _Data, tp: int) -> list[_Unit]:
    """Per residual block of c channels on s x s pixels: 4 x c x s^2 (two batch-norm inputs, the first ReLU's
    output, the block's output), 5 with a downsampling shortcut. The four stages are the checkpointed and the
    FSDP units."""
    config = configs.Resnet18Config.of(spec)
    pixels = math.prod(config.input_shape)
    side = config.input_shape[1]
    stem = config.stem * side * side
    units = [
        _Unit(
            "stem",
            (_Param((config.stem, config.input_shape[0], 3, 3), True), *_norm(config.stem)),
            _Acts(fp32=pixels, cast=pixels, low=2 * stem),
            _Acts(low=stem),
        )
    ]
    channels = config.stem
    for index, (planes, blocks) in enumerate(config.stages):
        if index:
            side //= 2
        area = planes * side * side
        params: list[_Param] = []
        kept = _NONE
        for block in range(blocks):
            n_in = channels if block == 0 else planes
            params += [_Param((planes, n_in, 3, 3), True), *_norm(planes), _Param((planes, planes, 3, 3), True)]
            params += _norm(planes)
            shortcut = block == 0 and (n_in != planes)
            if shortcut:
                params += [_Param((planes, n_in, 1, 1), True), *_norm(planes)]
            kept += _Acts(low=(5 if shortcut else 4) * area)
        units.append(
            _Unit(f"layer{index + 1}", tuple(params), kept, _Acts(low=area), checkpointed=True, fsdp_unit=True)
        )
        channels = planes
    units.append(
        _Unit(
            "head",
            _linear(config.features, data.classes),
            _Acts(low=config.features) + _loss(data.classes),
            _Acts(low=data.classes),
        )
    )
    return units


def _gpt(spec: RunSpec, data: _Data, tp: int) -> list[_Unit]:
    """Per block and sample, T tokens of width W with H heads, split t ways by tensor parallelism:
    fp32 2·T·W (the residual stream into the two layer norms) + 4·T (their statistics) + H·T/t (attention's
    log-sum-exp; fused attention keeps no T x T matrix); compute dtype (2 + 13/t)·T·W (layer-norm outputs;
    q, k, v; attention output and its reshaped copy; the 4·W hidden units before and after GELU), plus 2·T·W
    under autocast (q, k and v each cast the layer-norm output). About 17·T·W elements in fp32.
    Checkpointing keeps each block's output and recomputes one block."""
    context, vocab = data.sample_shape[0], data.classes
    config = configs.GptConfig.of(spec)
    width, depth, heads = config.width, config.depth, config.heads
    if width % heads:
        raise EstimateError(f"gpt width ({width}) must be divisible by heads ({heads})")
    if why := config.why_heads_do_not_split(tp):
        raise EstimateError(why)
    tw = context * width
    units = [
        _Unit(
            "embeddings",
            (_Param((vocab, width)), _Param((context, width))),
            _Acts(index=context, fp32=tw),
            _Acts(fp32=tw),
        )
    ]
    # Two layer norms, and the Linear layers split as the worker's plan (worker/models/gpt.py) splits them.
    linears = [_linear(linear.n_in, linear.n_out, linear.split, tp) for linear in config.block_linears()]
    block_params = (*_norm(width), *_norm(width), *(param for pair in linears for param in pair))
    block_kept = _Acts(
        fp32=2 * tw + 4 * context + heads * context / tp,
        low=(2 + (3 + 1 + 1 + 2 * config.mlp_ratio) / tp) * tw,
        cast=2 * tw,
    )
    for i in range(depth):
        units.append(
            _Unit(
                f"block{i}",
                block_params,
                block_kept,
                _Acts(fp32=tw),
                cut_before=True,
                checkpointed=True,  # gpt's spec (worker/models/gpt.py): the blocks are its checkpointing
                fsdp_unit=True,  # and FSDP units
            )
        )
    units.append(
        _Unit(
            "head",
            (*_norm(width), *_linear(width, vocab)),
            _Acts(low=tw, fp32=2 * context) + _loss(context * vocab),
            _Acts(low=context * vocab),
        )
    )
    return units


_MODELS: dict[Model, Callable[[RunSpec, _Data, int], list[_Unit]]] = {
    Model.mlp: _mlp,
    Model.cnn: _cnn,
    Model.resnet18: _resnet18,
    Model.gpt: _gpt,
}


def _units(spec: RunSpec, tp: int = 1) -> list[_Unit]:
    return _MODELS[spec.model](spec, _data(spec), tp)


def parameter_count(spec: RunSpec) -> int:
    """Trainable parameters of the whole model the spec builds, as the worker's `start` record reports them."""
    return sum(unit.numel for unit in _units(spec))


def _stage(units: list[_Unit], stage: int, stages: int, model: Model) -> tuple[list[_Unit], _Acts]:
    """One pipeline stage's units, cut as the worker cuts them, and the activation it receives."""
    cuts = [i for i, unit in enumerate(units) if unit.cut_before]
    if len(cuts) < stages:
        what = "blocks" if model is Model.gpt else "layers with weights"
        raise EstimateError(f"{model} has {len(cuts)} {what}: too few for {stages} pipeline stages")
    groups = even_groups(len(cuts), stages)
    start = 0 if stage == 0 else cuts[groups[stage].start]
    end = len(units) if stage == stages - 1 else cuts[groups[stage + 1].start]
    return units[start:end], (units[start - 1].out if start else _NONE)


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
