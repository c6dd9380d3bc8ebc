"""Each model's layers as the torch-free side counts them: the parameters each holds (as one rank holds them after
tensor parallelism), the activations it keeps and passes on, where a pipeline may cut, which units FSDP shards and
activation checkpointing recomputes, and the batch-norm buffers it carries.

The memory estimate (server/services/estimate.py) and the traffic each strategy moves (contract/traffic.py) both
count from these, so the two read one description of each model; the tests hold it against the real modules.
Elements are counted here; bytes are the reader's (the compute dtype is the run's).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from contract import configs
from contract.spec import Dataset, Model, RunSpec
from contract.splits import even_groups

FP32 = 4
LOW = 2  # bf16 and fp16
INDEX = 8  # int64


class LayoutError(ValueError):
    """The spec passes validation but the worker would refuse its layout (the worker raises the same)."""


@dataclass(frozen=True)
class Acts:
    """Activation elements per sample, by the bytes each takes."""

    low: float = 0.0  # compute dtype: 4 bytes in fp32, 2 under autocast
    fp32: float = 0.0  # fp32 whatever the precision
    index: float = 0.0  # int64
    cast: float = 0.0  # extra copies only autocast makes (of fp32 tensors fed to matrix products)

    def __add__(self, other: Acts) -> Acts:
        return Acts(self.low + other.low, self.fp32 + other.fp32, self.index + other.index, self.cast + other.cast)

    def __sub__(self, other: Acts) -> Acts:
        return Acts(self.low - other.low, self.fp32 - other.fp32, self.index - other.index, self.cast - other.cast)

    def bytes(self, autocast: bool) -> float:
        low = LOW if autocast else FP32
        return self.low * low + self.fp32 * FP32 + self.index * INDEX + (self.cast * LOW if autocast else 0.0)


NONE = Acts()


@dataclass(frozen=True)
class Param:
    shape: tuple[int, ...]  # as one rank holds it after tensor parallelism
    matmul: bool = False  # a Linear or Conv weight: autocast makes a low-precision copy that backward keeps

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def shard(self, ways: int) -> int:
        """Elements of this rank's FSDP shard: dim 0 split `ways` ways, padded to equal chunks."""
        return -(-self.shape[0] // ways) * math.prod(self.shape[1:])


@dataclass(frozen=True)
class Unit:
    """A module of the model, in forward order."""

    name: str
    params: tuple[Param, ...] = ()
    # Kept for backward per sample, counting its own output where a later layer keeps it, never its input.
    kept: Acts = NONE
    # Its output per sample: what a pipeline stage boundary sends on and the next stage keeps.
    out: Acts = NONE
    # What the model's spec (worker/models/<name>.py) says of the module:
    cut_before: bool = False  # a pipeline stage may start here (its pipeline_stage)
    checkpointed: bool = False  # recomputed in backward under activation checkpointing (its checkpoint_units)
    fsdp_unit: bool = False  # sharded on its own (its fsdp_units); otherwise part of the root
    # Batch norm's buffers: running statistics (fp32 elements) and batch counters (int64), which DDP broadcasts.
    norm_channels: int = 0
    norms: int = 0

    @property
    def numel(self) -> int:
        return sum(p.numel for p in self.params)


@dataclass(frozen=True)
class DataSet:
    sample_shape: tuple[int, ...]
    classes: int  # or the vocabulary
    bytes: int  # training and validation sets, inputs and targets


def _classified(shape: tuple[int, ...], samples: tuple[int, int]) -> DataSet:
    count = sum(samples)
    return DataSet(shape, configs.CLASSES, count * math.prod(shape) * FP32 + count * INDEX)


def data_set(spec: RunSpec) -> DataSet:
    """The shape the model reads (contract.configs.data_shape) and the bytes of the data set, as worker/datasets/
    loads them."""
    shape = configs.data_shape(spec)
    if spec.dataset is Dataset.text:
        context = shape.sample_shape[0]
        train_chars = int(configs.TEXT_MAX_CHARS * configs.TEXT_TRAIN_FRACTION)
        windows = (train_chars - 1) // context + (configs.TEXT_MAX_CHARS - train_chars - 1) // context
        return DataSet(shape.sample_shape, shape.classes, 2 * windows * context * INDEX)
    if spec.dataset is Dataset.digits:
        return _classified(shape.sample_shape, configs.DIGITS_SAMPLES)
    if spec.dataset is Dataset.cifar10:
        return _classified(shape.sample_shape, configs.CIFAR10_SAMPLES)
    # synthetic
    if spec.model is Model.gpt:
        context = shape.sample_shape[0]
        return DataSet(shape.sample_shape, shape.classes, 2 * sum(configs.SYNTHETIC_SEQUENCES) * context * INDEX)
    if spec.model is Model.mlp:
        return _classified(shape.sample_shape, configs.SYNTHETIC_VECTORS)
    return _classified(shape.sample_shape, configs.SYNTHETIC_IMAGES)


def _linear(n_in: int, n_out: int, split: configs.Split | None = None, tp: int = 1) -> tuple[Param, Param]:
    """Weight and bias as one rank holds them: column-parallel splits both, row-parallel the weight only."""
    if split == "column":
        return Param((n_out // tp, n_in), True), Param((n_out // tp,))
    if split == "row":
        return Param((n_out, n_in // tp), True), Param((n_out,))
    return Param((n_out, n_in), True), Param((n_out,))


def _loss(classes: float) -> Acts:
    # cross_entropy in fp32: log-softmax keeps its output, and backward starts with a gradient as large.
    return Acts(fp32=2 * classes)


def _mlp(spec: RunSpec, data: DataSet, tp: int) -> list[Unit]:
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
        raise LayoutError(why)
    units = [Unit("flatten", kept=Acts(fp32=features, cast=features), out=Acts(fp32=features))]
    for i, split in enumerate(splits):
        n_out = sizes[i + 1] // tp if split == "column" else sizes[i + 1]
        params = _linear(sizes[i], sizes[i + 1], split, tp)
        if i == linears - 1:
            units.append(Unit(f"linear{i}", params, _loss(n_out), Acts(low=n_out), cut_before=True))
        else:
            units.append(Unit(f"linear{i}", params, out=Acts(low=n_out), cut_before=True))
            units.append(Unit(f"relu{i}", kept=Acts(low=n_out), out=Acts(low=n_out)))
    return units


def _cnn(spec: RunSpec, data: DataSet, tp: int) -> list[Unit]:
    """Per stage: the conv's output (batch norm keeps it), the ReLU's output, and max-pool's int64 indices and
    output (the next layer keeps it); then the head. Checkpointing each conv alone frees nothing, as in mlp."""
    config = configs.CnnConfig.of(spec)
    pixels = math.prod(config.input_shape)
    units = [Unit("input", kept=Acts(fp32=pixels, cast=pixels), out=Acts(fp32=pixels))]
    channels, side = config.input_shape[0], config.input_shape[1]
    for out in config.channels:
        full, pooled = out * side * side, out * (side // 2) ** 2
        units += [
            Unit("conv", (Param((out, channels, 3, 3), True),), Acts(low=full), Acts(low=full), cut_before=True),
            Unit(
                "norm", (Param((out,)), Param((out,))), out=Acts(low=full), cut_before=True, norm_channels=out, norms=1
            ),
            Unit("relu", kept=Acts(low=full), out=Acts(low=full)),
            Unit("pool", kept=Acts(low=pooled, index=pooled), out=Acts(low=pooled)),
        ]
        channels, side = out, side // 2
    flat, hidden = channels * side * side, config.hidden
    units += [
        Unit("flatten", out=Acts(low=flat)),
        Unit("fc", _linear(flat, hidden), out=Acts(low=hidden), cut_before=True),
        Unit("relu", kept=Acts(low=hidden), out=Acts(low=hidden)),
        Unit("head", _linear(hidden, data.classes), _loss(data.classes), Acts(low=data.classes), cut_before=True),
    ]
    return units


def _norm(channels: int) -> tuple[Param, Param]:
    return Param((channels,)), Param((channels,))


def _resnet18(spec: RunSpec, data: DataSet, tp: int) -> list[Unit]:
    """Per residual block of c channels on s x s pixels: 4 x c x s^2 (two batch-norm inputs, the first ReLU's
    output, the block's output), 5 with a downsampling shortcut. The four stages are the checkpointed and the
    FSDP units."""
    config = configs.Resnet18Config.of(spec)
    pixels = math.prod(config.input_shape)
    side = config.input_shape[1]
    stem = config.stem * side * side
    units = [
        Unit(
            "stem",
            (Param((config.stem, config.input_shape[0], 3, 3), True), *_norm(config.stem)),
            Acts(fp32=pixels, cast=pixels, low=2 * stem),
            Acts(low=stem),
            norm_channels=config.stem,
            norms=1,
        )
    ]
    channels = config.stem
    for index, (planes, blocks) in enumerate(config.stages):
        if index:
            side //= 2
        area = planes * side * side
        params: list[Param] = []
        kept = NONE
        norms = 0
        for block in range(blocks):
            n_in = channels if block == 0 else planes
            params += [Param((planes, n_in, 3, 3), True), *_norm(planes), Param((planes, planes, 3, 3), True)]
            params += _norm(planes)
            shortcut = block == 0 and (n_in != planes)
            if shortcut:
                params += [Param((planes, n_in, 1, 1), True), *_norm(planes)]
            kept += Acts(low=(5 if shortcut else 4) * area)
            norms += 3 if shortcut else 2
        units.append(
            Unit(
                f"layer{index + 1}",
                tuple(params),
                kept,
                Acts(low=area),
                checkpointed=True,
                fsdp_unit=True,
                norm_channels=norms * planes,
                norms=norms,
            )
        )
        channels = planes
    units.append(
        Unit(
            "head",
            _linear(config.features, data.classes),
            Acts(low=config.features) + _loss(data.classes),
            Acts(low=data.classes),
        )
    )
    return units


def _gpt(spec: RunSpec, data: DataSet, tp: int) -> list[Unit]:
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
        raise LayoutError(f"gpt width ({width}) must be divisible by heads ({heads})")
    if why := config.why_heads_do_not_split(tp):
        raise LayoutError(why)
    tw = context * width
    units = [
        Unit(
            "embeddings",
            (Param((vocab, width)), Param((context, width))),
            Acts(index=context, fp32=tw),
            Acts(fp32=tw),
        )
    ]
    # Two layer norms, and the Linear layers split as the worker's plan (worker/models/gpt.py) splits them.
    linears = [_linear(linear.n_in, linear.n_out, linear.split, tp) for linear in config.block_linears()]
    block_params = (*_norm(width), *_norm(width), *(param for pair in linears for param in pair))
    block_kept = Acts(
        fp32=2 * tw + 4 * context + heads * context / tp,
        low=(2 + (3 + 1 + 1 + 2 * config.mlp_ratio) / tp) * tw,
        cast=2 * tw,
    )
    for i in range(depth):
        units.append(
            Unit(
                f"block{i}",
                block_params,
                block_kept,
                Acts(fp32=tw),
                cut_before=True,
                checkpointed=True,  # gpt's spec (worker/models/gpt.py): the blocks are its checkpointing
                fsdp_unit=True,  # and FSDP units
            )
        )
    units.append(
        Unit(
            "head",
            (*_norm(width), *_linear(width, vocab)),
            Acts(low=tw, fp32=2 * context) + _loss(context * vocab),
            Acts(low=context * vocab),
        )
    )
    return units


_MODELS: dict[Model, Callable[[RunSpec, DataSet, int], list[Unit]]] = {
    Model.mlp: _mlp,
    Model.cnn: _cnn,
    Model.resnet18: _resnet18,
    Model.gpt: _gpt,
}


def units(spec: RunSpec, tp: int = 1) -> list[Unit]:
    return _MODELS[spec.model](spec, data_set(spec), tp)


def parameter_count(spec: RunSpec) -> int:
    """Trainable parameters of the whole model the spec builds, as the worker's `start` record reports them."""
    return sum(unit.numel for unit in units(spec))


def pipeline_stage(units: list[Unit], stage: int, stages: int, model: Model) -> tuple[list[Unit], Acts]:
    """One pipeline stage's units, cut as the worker cuts them, and the activation it receives."""
    cuts = [i for i, unit in enumerate(units) if unit.cut_before]
    if len(cuts) < stages:
        what = "blocks" if model is Model.gpt else "layers with weights"
        raise LayoutError(f"{model} has {len(cuts)} {what}: too few for {stages} pipeline stages")
    groups = even_groups(len(cuts), stages)
    start = 0 if stage == 0 else cuts[groups[stage].start]
    end = len(units) if stage == stages - 1 else cuts[groups[stage + 1].start]
    return units[start:end], (units[start - 1].out if start else NONE)


def train_samples(spec: RunSpec) -> int:
    """Samples in the training set the spec's data set gives its model, as worker/datasets/ loads them."""
    if spec.dataset is Dataset.text:
        context = configs.GptConfig.of(spec).context
        return (int(configs.TEXT_MAX_CHARS * configs.TEXT_TRAIN_FRACTION) - 1) // context
    if spec.dataset is Dataset.digits:
        return configs.DIGITS_SAMPLES.train
    if spec.dataset is Dataset.cifar10:
        return configs.CIFAR10_SAMPLES.train
    if spec.model is Model.gpt:
        return configs.SYNTHETIC_SEQUENCES.train
    if spec.model is Model.mlp:
        return configs.SYNTHETIC_VECTORS.train
    return configs.SYNTHETIC_IMAGES.train


def steps_per_epoch(spec: RunSpec) -> int:
    """Optimizer steps in one of the spec's epochs: the worker's count (worker/train.py), torch-free."""
    steps = train_samples(spec) // spec.global_batch_size
    return steps if spec.steps_per_epoch is None else min(steps, spec.steps_per_epoch)
