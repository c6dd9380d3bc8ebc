"""A strategy's step time at N processes, predicted from a 1-process run and the fabric's fits: pure arithmetic.

step = compute + exposed communication + pipeline bubble, where
- compute is the 1-process run's measured time per step (data, forward and backward, optimizer: its `timing`
  record's parts less communication), scaled by the work one rank does at N: forward, backward and data by the
  samples a rank takes per step against the reference's; by the share of the model a rank holds where tensor
  parallelism splits layers (the share of parameters it keeps, which is the share of a Linear's FLOPs; attention's
  own products are counted as split too); by 1/p for a pipeline stage (the stages taken as balanced); the optimizer
  by the share of parameters a rank updates (FSDP's shard, TP's split, PP's stage). A later helper's FLOPs per
  sample over the measured peak can stand in for the measured compute: pass `compute_s` (see `flops_compute_s`).
- exposed communication is, over the step's collectives (contract.traffic), the latency-bandwidth time of each
  with its tier's fit (contract.fabric.AlphaBeta.time_s), less the share the worker measured running under compute
  (comm_overlapped over comm + comm_overlapped in a multi-process run's timing; none measured: 0, all exposed, the
  upper bound). A pipeline's is the busiest stage's sends (an inner stage has two neighbours).
- the bubble is a pipeline stage's compute x (p-1)/m: the stage idles (p-1) of every (m+p-1) slots.

No fit for a tier the step uses: no prediction, and the reason says which fit and how to get it (a made-up
bandwidth would be a number that may be wrong without saying so).

The tolerance `off_model` holds a measured point to is a setting (prediction_tolerance); see server/config.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from contract import layers
from contract.fabric import AlphaBeta, Collective, Tier
from contract.spec import RunSpec, Strategy
from contract.traffic import Traffic, Transfer, step_traffic


@dataclass(frozen=True)
class MeasuredStep:
    """One run's measured time per step by part (the worker's time breakdown), seconds."""

    data_s: float
    compute_s: float
    optimizer_s: float
    comm_s: float = 0.0
    comm_overlapped_s: float | None = None

    @property
    def step_s(self) -> float:
        return self.data_s + self.compute_s + self.optimizer_s + self.comm_s

    def overlap_fraction(self) -> float | None:
        """The share of communication that ran under compute; None where none was measured."""
        if self.comm_overlapped_s is None:
            return None
        total = self.comm_s + self.comm_overlapped_s
        return self.comm_overlapped_s / total if total > 0 else None


@dataclass(frozen=True)
class Reference:
    """The 1-process run a prediction scales from."""

    spec: RunSpec
    step: MeasuredStep


@dataclass(frozen=True)
class StepPrediction:
    compute_s: float
    comm_s: float  # exposed
    bubble_s: float
    comm_total_s: float  # before overlap
    overlap_fraction: float
    steps_per_epoch: int

    @property
    def step_s(self) -> float:
        return self.compute_s + self.comm_s + self.bubble_s

    @property
    def epoch_s(self) -> float:
        return self.step_s * self.steps_per_epoch


@dataclass(frozen=True)
class NoPrediction:
    reason: str


def samples_per_rank(spec: RunSpec) -> float:
    """Samples one rank computes per optimizer step: its data-parallel share of the global batch."""
    return spec.global_batch_size / spec.dp_degree


def model_share(spec: RunSpec) -> float:
    """The share of the model's work one rank does: what tensor parallelism leaves it, or one pipeline stage."""
    if spec.strategy is Strategy.pp:
        return 1 / spec.pp
    if spec.tp > 1:
        whole = sum(unit.numel for unit in layers.units(spec))
        return sum(unit.numel for unit in layers.units(spec, spec.tp)) / whole
    return 1.0


def optimizer_share(spec: RunSpec) -> float:
    """The share of the parameters one rank's optimizer updates."""
    sharded = spec.dp_degree if spec.strategy in (Strategy.fsdp, Strategy.fsdp_tp) else 1
    if spec.strategy is Strategy.fsdp and spec.fsdp_sharding == "hybrid":
        sharded = spec.gpus_per_node
    return model_share(spec) / sharded


def flops_compute_s(flops_per_sample: float, samples: float, peak_flops_per_s: float) -> float:
    """The hook for a FLOPs-based compute time (training FLOPs per sample x samples a rank takes per step over the
    measured peak): pass its result as predict_step's compute_s in place of the measured 1-process compute."""
    return flops_per_sample * samples / peak_flops_per_s


def scaled_compute_s(reference: Reference, spec: RunSpec) -> float:
    """The reference's measured compute, data and optimizer time per step, scaled to one rank of `spec`."""
    ref, step = reference.spec, reference.step
    per_sample = (step.data_s + step.compute_s) / samples_per_rank(ref)
    return per_sample * samples_per_rank(spec) * model_share(spec) + step.optimizer_s * optimizer_share(spec)


def missing_fits(traffic: Traffic, fits: Mapping[Tier, AlphaBeta]) -> list[Tier]:
    return sorted({t.tier for t in traffic.transfers if t.ranks > 1} - set(fits))


def transfer_s(transfer: Transfer, fits: Mapping[Tier, AlphaBeta]) -> float:
    return transfer.per_step * fits[transfer.tier].time_s(transfer.collective, transfer.ranks, transfer.nbytes)


def comm_total_s(traffic: Traffic, fits: Mapping[Tier, AlphaBeta]) -> float:
    """Seconds per step the collectives take on one rank, one after another: every group collective of its groups;
    for a pipeline, the sends and receives of its busiest stage."""
    groups = [t for t in traffic.transfers if t.collective is not Collective.send_recv]
    total = sum(transfer_s(t, fits) for t in groups)
    sends = [t for t in traffic.transfers if t.collective is Collective.send_recv]
    if sends:
        boundaries = {t.boundary for t in sends}
        stages = range(len(boundaries) + 1)
        total += max(sum(transfer_s(t, fits) for t in sends if t.boundary in (s - 1, s)) for s in stages)
    return total


def predict_step(
    reference: Reference,
    spec: RunSpec,
    fits: Mapping[Tier, AlphaBeta],
    overlap_fraction: float | None = None,
    compute_s: float | None = None,
) -> StepPrediction | NoPrediction:
    """The spec's step at its process count; `compute_s` replaces the measured-and-scaled compute (FLOPs hook)."""
    try:
        traffic = step_traffic(spec)
    except layers.LayoutError as refused:
        return NoPrediction(f"the worker would refuse this layout: {refused}")
    if missing := missing_fits(traffic, fits):
        names = " and ".join(tier.value.replace("_", "-") for tier in missing)
        return NoPrediction(
            f"no {names} fabric fit for {spec.nodes} node(s) x {spec.gpus_per_node} process(es): "
            "run the fabric probe on this partition at this shape first"
        )
    compute = scaled_compute_s(reference, spec) if compute_s is None else compute_s
    total = comm_total_s(traffic, fits)
    overlap = min(max(overlap_fraction or 0.0, 0.0), 1.0)
    bubble = compute * traffic.bubble_fraction / (1 - traffic.bubble_fraction) if traffic.bubble_fraction else 0.0
    return StepPrediction(
        compute_s=compute,
        comm_s=total * (1 - overlap),
        bubble_s=bubble,
        comm_total_s=total,
        overlap_fraction=overlap,
        steps_per_epoch=layers.steps_per_epoch(spec),
    )


@dataclass(frozen=True)
class Residual:
    """A measured point against its prediction: how much slower (positive) or faster, and which part differs."""

    relative: float  # (measured - predicted) / predicted
    compute_excess_s: float  # measured compute (with data and optimizer) less predicted compute
    comm_excess_s: float  # measured exposed communication less predicted exposed communication and bubble


def residual(predicted: StepPrediction, measured: MeasuredStep) -> Residual:
    compute = measured.data_s + measured.compute_s + measured.optimizer_s
    return Residual(
        relative=(measured.step_s - predicted.step_s) / predicted.step_s,
        compute_excess_s=compute - predicted.compute_s,
        comm_excess_s=measured.comm_s - (predicted.comm_s + predicted.bubble_s),
    )
