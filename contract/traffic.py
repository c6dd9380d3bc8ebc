"""The collectives each strategy runs in one optimizer step, and the bytes of each, counted from the model's layers.

Torch-free: the prediction (server/services/prediction.py) sets these against the fabric's latency-bandwidth fits
(contract.fabric) before any multi-process run has happened. Sizes are buffers as nccl-tests counts them: an
all-reduce's buffer, an all-gather's whole output, a reduce-scatter's whole input, one send's tensor. The test
(tests/worker/parallel/test_traffic.py) holds every strategy's list against the collectives a real step ran.

What each strategy moves, as the worker (worker/parallel/) sets it up:
- ddp: every gradient, all-reduced once per optimizer step in buckets (DDP's own assignment: parameters in reverse
  order, the first bucket closed at 1 MiB, the others at 25 MiB); gradients are fp32 (autocast keeps fp32 master
  weights). A model with batch norm has its buffers broadcast from rank 0 before every forward.
- fsdp: per FSDP unit, its parameters all-gathered in forward and again in backward (resharded after forward),
  its gradients reduce-scattered; the root (what no unit holds) is gathered once per microstep and
  stays gathered through backward. fp32 (the worker sets no mixed-precision policy); each parameter's first
  dimension padded to a multiple of the shard group. Hybrid: gathered and scattered within a node, the shards'
  gradients then all-reduced across the nodes.
- tp: per row-parallel layer its output all-reduced in forward; per column-parallel layer whose input carries a
  gradient, that gradient all-reduced in backward (a layer fed the data has none). Activations are in the compute
  dtype (2 bytes under autocast).
- pp: per stage boundary and microbatch, the activation sent forward and its gradient sent back; the bubble is
  (p-1)/(m+p-1) of the step.
- fsdp_tp: tp's all-reduces within each tensor-parallel group, fsdp's traffic over the data-parallel group on the
  parameters as tensor parallelism left them.
Gradient accumulation: forward and backward traffic (broadcasts, gathers, activations) every microstep; gradients
are reduced only on the last: DDP's all-reduce (no_sync) and FSDP's reduce-scatter (and, hybrid, all-reduce; FSDP2's
gradient sync is off through each earlier microstep's backward, where FSDP2 reads it). tests/worker/parallel/
test_traffic.py counts the real step's collectives against this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from contract import configs, layers
from contract.fabric import Collective, Tier
from contract.spec import FsdpSharding, Model, Precision, RunSpec, Strategy

MIB = 2**20
# DDP's bucket caps (torch.nn.parallel.DistributedDataParallel: bucket_cap_mb=25 and its 1 MiB first bucket).
DDP_FIRST_BUCKET_BYTES = 1 * MIB
DDP_BUCKET_BYTES = 25 * MIB
GRADIENT = layers.FP32  # gradients and FSDP's gathered parameters: fp32 whatever the precision
COUNTER = layers.INDEX  # batch norm's num_batches_tracked


class Phase(StrEnum):
    forward = "forward"
    backward = "backward"


@dataclass(frozen=True)
class Transfer:
    """One collective a step runs `per_step` times in each of its `groups` groups of `ranks` ranks at once."""

    collective: Collective
    nbytes: int  # the buffer, as nccl-tests counts it
    ranks: int
    tier: Tier
    per_step: int
    phase: Phase
    what: str
    groups: int = 1
    boundary: int | None = None  # pp: the stage boundary (stage s to s+1) it crosses

    @property
    def bytes_per_step(self) -> int:
        """What one group's buffers add up to in a step (for a send: what one sender sends)."""
        return self.nbytes * self.per_step


@dataclass(frozen=True)
class Traffic:
    """A step's collectives, and the share of the step a pipeline waits in its bubble."""

    transfers: tuple[Transfer, ...]
    bubble_fraction: float = 0.0

    def by_collective(self) -> dict[Collective, int]:
        """Bytes per step by collective, over every group and rank that takes part (a send counted once)."""
        totals: dict[Collective, int] = {}
        for t in self.transfers:
            takers = 1 if t.collective is Collective.send_recv else t.ranks
            totals[t.collective] = totals.get(t.collective, 0) + t.bytes_per_step * t.groups * takers
        return totals


def pipeline_bubble(stages: int, microbatches: int) -> float:
    """The share of a pipeline step in which a stage waits: (p-1)/(m+p-1), GPipe's and 1F1B's alike."""
    return (stages - 1) / (microbatches + stages - 1)


def _tier(spans_nodes: bool) -> Tier:
    return Tier.inter_node if spans_nodes else Tier.intra_node


def _activation_bytes(spec: RunSpec) -> int:
    return layers.FP32 if spec.precision is Precision.fp32 else layers.LOW


def _microsteps(spec: RunSpec) -> int:
    return spec.grad_accum_steps


def _micro_batch(spec: RunSpec) -> int:
    """Samples one data-parallel rank takes per microstep."""
    return spec.global_batch_size // (spec.dp_degree * spec.grad_accum_steps)


def ddp_buckets(numels: list[int]) -> list[int]:
    """Elements per gradient bucket, parameters given in the model's order: DDP fills buckets from the last."""
    buckets: list[int] = []
    current = 0
    for numel in reversed(numels):
        current += numel
        cap = DDP_FIRST_BUCKET_BYTES if not buckets else DDP_BUCKET_BYTES
        if current * GRADIENT >= cap:
            buckets.append(current)
            current = 0
    if current:
        buckets.append(current)
    return buckets


def _ddp(spec: RunSpec, units: list[layers.Unit]) -> list[Transfer]:
    ranks, tier = spec.gpus, _tier(spec.nodes > 1)
    numels = [param.numel for unit in units for param in unit.params]
    transfers = [
        Transfer(Collective.all_reduce, GRADIENT * n, ranks, tier, 1, Phase.backward, f"gradient bucket {i + 1}")
        for i, n in enumerate(ddp_buckets(numels))
    ]
    channels = sum(unit.norm_channels for unit in units)
    norms = sum(unit.norms for unit in units)
    if norms:
        # Running mean and variance, then the batch counters: one coalesced broadcast per dtype.
        micro = _microsteps(spec)
        transfers.append(
            Transfer(Collective.broadcast, 2 * channels * layers.FP32, ranks, tier, micro, Phase.forward, "norm stats")
        )
        transfers.append(
            Transfer(Collective.broadcast, norms * COUNTER, ranks, tier, micro, Phase.forward, "norm counters")
        )
    return transfers


def _padded(param: layers.Param, ways: int) -> int:
    """Elements of a parameter gathered whole: its first dimension padded to equal shards."""
    return param.shard(ways) * ways


def _fsdp(spec: RunSpec, units: list[layers.Unit], ways: int, groups: int, spans_nodes: bool) -> list[Transfer]:
    """Units gathered forward and backward, the root once; gradients reduce-scattered (and, hybrid, all-reduced)."""
    tier = _tier(spans_nodes)
    micro = _microsteps(spec)
    sharded = [(unit.name, unit.params) for unit in units if unit.fsdp_unit]
    root = tuple(param for unit in units if not unit.fsdp_unit for param in unit.params)
    hybrid = spec.strategy is Strategy.fsdp and spec.fsdp_sharding is FsdpSharding.hybrid and spec.nodes > 1
    transfers: list[Transfer] = []
    for name, params, gathers in [("root", root, 1), *((name, params, 2) for name, params in sharded)]:
        if not params:
            continue
        nbytes = GRADIENT * sum(_padded(param, ways) for param in params)
        transfers.append(Transfer(Collective.all_gather, nbytes, ways, tier, micro, Phase.forward, name, groups))
        if gathers == 2:
            transfers.append(Transfer(Collective.all_gather, nbytes, ways, tier, micro, Phase.backward, name, groups))
        transfers.append(Transfer(Collective.reduce_scatter, nbytes, ways, tier, 1, Phase.backward, name, groups))
        if hybrid:
            # Each shard's gradient, averaged over the node's replicas: one rank per node in each group.
            shard = nbytes // ways
            transfers.append(
                Transfer(Collective.all_reduce, shard, spec.nodes, Tier.inter_node, 1, Phase.backward, name, ways)
            )
    return transfers


def _tp_layers(spec: RunSpec) -> list[tuple[configs.LinearShape, bool, int]]:
    """Each split Linear layer, whether its input carries a gradient, and its rows per sample (tokens for gpt)."""
    if spec.model is Model.gpt:
        config = configs.GptConfig.of(spec)
        return [(linear, True, config.context) for _ in range(config.depth) for linear in config.block_linears()]
    config_mlp = configs.MlpConfig.of(spec)
    data = configs.data_shape(spec)
    sizes = [math.prod(data.sample_shape), *[config_mlp.width] * config_mlp.depth, data.classes]
    splits = configs.paired_splits(len(sizes) - 1)
    return [
        (configs.LinearShape(f"linear{i}", sizes[i], sizes[i + 1], split), i > 0, 1) for i, split in enumerate(splits)
    ]


def _tp(spec: RunSpec, ways: int, groups: int, spans_nodes: bool) -> list[Transfer]:
    tier, micro = _tier(spans_nodes), _microsteps(spec)
    samples = _micro_batch(spec)
    element = _activation_bytes(spec)
    transfers = []
    for linear, carries_gradient, rows in _tp_layers(spec):
        if linear.split == "row":
            nbytes = samples * rows * linear.n_out * element
            what = f"{linear.name} output"
            transfers.append(Transfer(Collective.all_reduce, nbytes, ways, tier, micro, Phase.forward, what, groups))
        elif linear.split == "column" and carries_gradient:
            nbytes = samples * rows * linear.n_in * element
            what = f"{linear.name} input gradient"
            transfers.append(Transfer(Collective.all_reduce, nbytes, ways, tier, micro, Phase.backward, what, groups))
    return transfers


def _pp(spec: RunSpec, units: list[layers.Unit]) -> list[Transfer]:
    stages = spec.pp
    per_microbatch = spec.global_batch_size // (spec.grad_accum_steps * spec.microbatches)
    times = spec.microbatches * _microsteps(spec)
    autocast = spec.precision is not Precision.fp32
    transfers = []
    for boundary in range(stages - 1):
        _, received = layers.pipeline_stage(units, boundary + 1, stages, spec.model)
        nbytes = math.ceil(received.bytes(autocast) * per_microbatch)
        tier = _tier(spec.nodes > 1 and (boundary + 1) % spec.gpus_per_node == 0)
        for phase, what in ((Phase.forward, "activation"), (Phase.backward, "activation gradient")):
            transfers.append(
                Transfer(Collective.send_recv, nbytes, 2, tier, times, phase, f"stage {boundary} {what}", 1, boundary)
            )
    return transfers


def step_traffic(spec: RunSpec) -> Traffic:
    """The collectives one optimizer step of the spec's strategy runs; raises layers.LayoutError for a layout the
    worker would refuse. Nothing moves on one process."""
    if spec.gpus == 1 or spec.strategy is Strategy.single:
        return Traffic(())
    if spec.strategy is Strategy.ddp:
        return Traffic(tuple(_ddp(spec, layers.units(spec))))
    if spec.strategy is Strategy.fsdp:
        hybrid = spec.fsdp_sharding is FsdpSharding.hybrid
        ways = spec.gpus_per_node if hybrid else spec.gpus
        groups = spec.nodes if hybrid else 1
        return Traffic(tuple(_fsdp(spec, layers.units(spec), ways, groups, spans_nodes=not hybrid and spec.nodes > 1)))
    if spec.strategy is Strategy.tp:
        return Traffic(tuple(_tp(spec, spec.tp, 1, spec.nodes > 1)))
    if spec.strategy is Strategy.fsdp_tp:
        tp, dp = spec.tp, spec.dp_degree
        units = layers.units(spec, tp)
        tp_spans = tp > spec.gpus_per_node
        transfers = _tp(spec, tp, dp, tp_spans) + _fsdp(spec, units, dp, tp, spans_nodes=spec.nodes > 1 and dp > 1)
        return Traffic(tuple(transfers))
    if spec.strategy is Strategy.pp:
        units = layers.units(spec)
        return Traffic(tuple(_pp(spec, units)), pipeline_bubble(spec.pp, spec.microbatches))
    raise ValueError(f"no traffic model for strategy {spec.strategy}")
