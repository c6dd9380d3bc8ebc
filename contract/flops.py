"""Each model's arithmetic per training sample, counted from its torch-free config, and model FLOPs utilisation.

Torch-free, so that the worker (which reports the figures) and the server (which divides them by a peak) count
alike. Only matrix products and convolutions are counted, as FLOPs by the usual convention (a multiply-add is 2):
they are nearly all of a model's arithmetic, and the rest (norms, activations, pooling, the optimizer) runs at
memory speed, not at the matmul peak MFU divides by. The counts are what torch.utils.flop_counter.FlopCounterMode
counts for one forward of the built model, which the tests hold them to; attention's two products are counted over
the whole T x T score matrix, as that counter counts them, not halved for the causal mask.

- training = 3 x forward: backward computes the gradients of the inputs and of the weights, each as costly as
  the forward.
- model FLOPs (MFU's numerator) leave out recomputation: they are the model's arithmetic, whatever the run does to
  save memory.
- hardware FLOPs (HFU's numerator) add, under activation checkpointing, one more forward of the checkpointed units
  (each model's spec in worker/models/ names them: gpt's blocks, resnet18's residual stages, every weighted layer of
  mlp and cnn), which backward recomputes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from contract import configs
from contract.spec import Model, RunSpec

# Training's FLOPs per forward FLOP: the forward, and a backward twice as costly.
TRAINING_PER_FORWARD = 3


@dataclass(frozen=True)
class ForwardFlops:
    """One sample's forward, in FLOPs: all of it, and the part in the units activation checkpointing recomputes."""

    total: int
    checkpointed: int


@dataclass(frozen=True)
class TrainingFlops:
    """One training sample's FLOPs: the model's (MFU), and what the hardware did (HFU: recomputation included)."""

    model: int
    hardware: int


def _linear(n_in: int, n_out: int, rows: int = 1) -> int:
    return 2 * rows * n_in * n_out


def _conv(channels_in: int, channels_out: int, kernel: int, side_out: int) -> int:
    return 2 * channels_out * side_out * side_out * channels_in * kernel * kernel


def _mlp(spec: RunSpec, shape: configs.DataShape) -> ForwardFlops:
    config = configs.MlpConfig.of(spec)
    sizes = [math.prod(shape.sample_shape), *[config.width] * config.depth, shape.classes]
    total = sum(_linear(n_in, n_out) for n_in, n_out in itertools.pairwise(sizes))
    # The worker checkpoints every weighted layer of a flat model but its batch norms: all of its matmuls.
    return ForwardFlops(total, total)


def _cnn(spec: RunSpec, shape: configs.DataShape) -> ForwardFlops:
    config = configs.CnnConfig.of(spec)
    channels, side = config.input_shape[0], config.input_shape[1]
    total = 0
    for out in config.channels:
        total += _conv(channels, out, 3, side)  # padding 1: the image keeps its side, then max-pool halves it
        channels, side = out, side // 2
    total += _linear(channels * side * side, config.hidden) + _linear(config.hidden, shape.classes)
    return ForwardFlops(total, total)


def _resnet18(spec: RunSpec, shape: configs.DataShape) -> ForwardFlops:
    config = configs.Resnet18Config.of(spec)
    side = config.input_shape[1]
    stem = _conv(config.input_shape[0], config.stem, 3, side)
    stages = 0
    channels = config.stem
    for index, (planes, blocks) in enumerate(config.stages):
        stride = 2 if index else 1  # torchvision's: every stage after the first halves the image in its first block
        side //= stride
        for block in range(blocks):
            n_in = channels if block == 0 else planes
            stages += _conv(n_in, planes, 3, side) + _conv(planes, planes, 3, side)
            if block == 0 and n_in != planes:
                stages += _conv(n_in, planes, 1, side)  # the downsampling shortcut
        channels = planes
    head = _linear(config.features, shape.classes)
    return ForwardFlops(stem + stages + head, stages)


def _gpt(spec: RunSpec, shape: configs.DataShape) -> ForwardFlops:
    config = configs.GptConfig.of(spec)
    (context,) = shape.sample_shape
    linears = sum(_linear(linear.n_in, linear.n_out, context) for linear in config.block_linears())
    # Scores q.k^T and their weighted sum of v: each 2 x T x T x head size per head, all heads W wide together.
    attention = 2 * 2 * context * context * config.width
    blocks = config.depth * (linears + attention)
    head = _linear(config.width, shape.classes, context)
    return ForwardFlops(blocks + head, blocks)


_MODELS = {Model.mlp: _mlp, Model.cnn: _cnn, Model.resnet18: _resnet18, Model.gpt: _gpt}


def forward_flops(spec: RunSpec) -> ForwardFlops:
    """One sample's forward through the spec's model (a sequence of `context` tokens for gpt)."""
    return _MODELS[spec.model](spec, configs.data_shape(spec))


def training_flops(spec: RunSpec) -> TrainingFlops:
    """One training sample's FLOPs, recomputation counted in the hardware's under activation checkpointing."""
    forward = forward_flops(spec)
    model = TRAINING_PER_FORWARD * forward.total
    return TrainingFlops(model, model + (forward.checkpointed if spec.activation_checkpointing else 0))


def utilization(samples_per_s: float, flops_per_sample: float, peak_tflops: float, devices: int) -> float:
    """The fraction of the devices' peak the run's arithmetic used: samples/s x FLOPs per sample over peak x devices.
    The one formula for MFU (model FLOPs) and HFU (hardware FLOPs) alike, against whichever peak."""
    return samples_per_s * flops_per_sample / (peak_tflops * 1e12 * devices)
