"""The step model set beside a comparison's series: per series its predicted points from a finished 1-process run
and the fabric's fits, each measured point's residual, and on the rows `predicted_step_time_s` and the `off_model`
flag. The arithmetic is server.services.prediction's; this module only finds what it needs among the runs."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from statistics import mean

from sqlmodel import Session, col, func, select

from contract.fabric import AlphaBeta, Tier
from contract.spec import RunSpec
from contract.states import RunState
from server.config import get_settings
from server.models import (
    CompareRow,
    FabricFitPublic,
    FabricProbe,
    Metric,
    ModelPoint,
    ModelSeries,
    PredictionPublic,
    Run,
)
from server.services import fabric, flags
from server.services.comparison import measures
from server.services.comparison.selection import Selection
from server.services.comparison.series import form_series
from server.services.prediction import (
    MeasuredStep,
    NoPrediction,
    Reference,
    StepPrediction,
    predict_step,
    residual,
)

# The fits of the fabric a run's layout ran (or will run) on, per tier: (session, the run's id, its spec, the
# collective backend); the run says where (its profile and partition), the spec at what shape.
FitsLookup = Callable[[Session, str, RunSpec, str], Mapping[Tier, AlphaBeta]]


def stored_fits(session: Session, run_id: str, spec: RunSpec, backend: str) -> Mapping[Tier, AlphaBeta]:
    """The fabric store's newest fits for the run's profile, partition and shape; for a run imported from a scaling
    card, the fits its card carries (its cluster's, not this one's); none for a run that names no partition
    (imported from a log, or from before partitions were kept): no bandwidth is guessed for it."""
    if (given := fabric.carried(session, [run_id]).get(run_id)) is not None:
        return fabric.carried_fits(given)
    run = session.get(Run, run_id)
    if run is None or run.profile is None or run.partition is None:
        return {}
    return fabric.fits_for(session, run.profile, run.partition, spec.nodes, spec.gpus_per_node, backend)


# Replaced in tests by fits given outright; the one place the prediction asks the fabric store.
fits_lookup: FitsLookup = stored_fits


def fabric_state(session: Session) -> tuple[int, str]:
    """What the fits the predictions read depend on: the probes stored, by count and newest. A comparison's kept
    answer is keyed by it too, so that a probe stored after the answer was made gives its rows their predictions."""
    count, newest = session.exec(select(func.count(), func.max(FabricProbe.measured_at))).one()
    return int(count), str(newest)


def backend_of(session: Session, run_id: str) -> str:
    """The collective backend the reference run used (its start record): the larger runs of its partition use the
    same devices, so the same backend; gloo where it printed none."""
    record = session.exec(
        select(Metric.record).where(Metric.run_id == run_id, Metric.kind == "start").order_by(col(Metric.id))
    ).first()
    backend = record.get("backend") if record else None
    return backend if isinstance(backend, str) else "gloo"


# The spec fields that make two runs the same model doing the same work per sample, whatever their layout.
_SAME_WORK = (
    "model",
    "dataset",
    "precision",
    "compile",
    "activation_checkpointing",
    "depth",
    "width",
    "heads",
    "context",
)


@dataclass(frozen=True)
class _Predicted:
    series: list[ModelSeries]
    fits: dict[Tier, AlphaBeta]
    by_run: dict[str, StepPrediction]


def breakdown(row: CompareRow) -> MeasuredStep | None:
    parts = row.time_breakdown
    if not parts or any(part not in parts for part in ("data", "compute", "optimizer")):
        return None
    return MeasuredStep(parts["data"], parts["compute"], parts["optimizer"], parts.get("comm", 0.0))


def _reference(item: measures.Measured, items: Sequence[measures.Measured]) -> measures.Measured | None:
    """The finished 1-process run to scale from: the series' own, else one of the selection doing the same work."""
    finished = [
        other
        for other in items
        if other.spec.gpus == 1 and other.row.state is RunState.completed and breakdown(other.row) is not None
    ]
    own = [other for other in finished if other.row.series == item.row.series]
    same = [
        other for other in finished if all(getattr(other.spec, name) == getattr(item.spec, name) for name in _SAME_WORK)
    ]
    chosen = own or same
    return chosen[0] if chosen else None


def _overlaps(session: Session, run_ids: Collection[str]) -> dict[str, float]:
    """Each run's share of communication that ran under compute, from its ranks' timing records."""
    shares: dict[str, list[float]] = {}
    records = session.exec(
        select(Metric.run_id, Metric.record).where(
            col(Metric.run_id).in_(run_ids), Metric.kind == "timing", col(Metric.counts)
        )
    )
    for run_id, record in records:
        hidden, waited = record.get("comm_overlapped_s"), record.get("comm_s")
        if isinstance(hidden, int | float) and isinstance(waited, int | float) and hidden + waited > 0:
            shares.setdefault(run_id, []).append(hidden / (hidden + waited))
    return {run_id: mean(values) for run_id, values in shares.items()}


def _point(gpus: int, members: list[measures.Measured], predicted: StepPrediction | NoPrediction) -> ModelPoint:
    measured = [m.row.step_time_s for m in members if m.row.step_time_s is not None and m.row.ingest_done]
    spec = members[0].spec
    point = ModelPoint(
        gpus=gpus,
        nodes=spec.nodes,
        step_time_s=None,
        epoch_time_s=None,
        speedup=None,
        efficiency=None,
        compute_s=None,
        comm_s=None,
        bubble_s=None,
        run_ids=[m.row.run_id for m in members],
        measured_step_time_s=mean(measured) if measured else None,
    )
    if isinstance(predicted, NoPrediction):
        point.unavailable = predicted.reason
        return point
    point.step_time_s, point.epoch_time_s = predicted.step_s, predicted.epoch_s
    point.compute_s, point.comm_s, point.bubble_s = predicted.compute_s, predicted.comm_s, predicted.bubble_s
    point.comm_total_s, point.overlap_fraction = predicted.comm_total_s, predicted.overlap_fraction
    if point.measured_step_time_s is not None:
        point.residual = (point.measured_step_time_s - predicted.step_s) / predicted.step_s
    return point


def speedups(points: list[ModelPoint], weak: bool) -> None:
    """Predicted speed-up and efficiency against the series' smallest predicted point, as compare defines them."""
    timed = [(p, p.step_time_s, p.epoch_time_s) for p in points if p.step_time_s and p.epoch_time_s]
    if not timed:
        return
    base, base_step, base_epoch = timed[0]
    for p, step, epoch in timed:
        ratio = p.gpus / base.gpus
        if weak:
            p.efficiency = base_step / step
            p.speedup = p.efficiency * ratio
        else:
            p.speedup = base_epoch / epoch
            p.efficiency = p.speedup / ratio


def _series(
    session: Session, name: str, members: list[measures.Measured], items: Sequence[measures.Measured]
) -> tuple[ModelSeries, dict[Tier, AlphaBeta], dict[str, StepPrediction]]:
    first = members[0]
    reference = _reference(first, items)
    series = ModelSeries(
        series=name,
        strategy=first.spec.strategy.value,
        scaling=first.row.scaling,
        reference_run_id=reference.row.run_id if reference else None,
        basis="",
        points=[],
    )
    if reference is None or (step := breakdown(reference.row)) is None:
        series.basis = (
            "no prediction yet: it scales from a finished 1-process run of the same model, data set and precision "
            "with a time breakdown, and the selection has none; run it (gpus 1) first"
        )
        return series, {}, {}
    ref = Reference(reference.spec, step)
    overlaps = _overlaps(session, [m.row.run_id for m in members if m.spec.gpus > 1])
    overlap = mean(overlaps.values()) if overlaps else None
    backend = backend_of(session, reference.row.run_id)
    used: dict[Tier, AlphaBeta] = {}
    by_run: dict[str, StepPrediction] = {}
    by_gpus: dict[int, list[measures.Measured]] = {}
    for member in members:
        by_gpus.setdefault(member.spec.gpus, []).append(member)
    for gpus in sorted(by_gpus):
        at = by_gpus[gpus]
        fits = dict(fits_lookup(session, at[0].row.run_id, at[0].spec, backend)) if gpus > 1 else {}
        predicted = predict_step(ref, at[0].spec, fits, overlap)
        if isinstance(predicted, StepPrediction):
            used.update(fits)
            by_run.update({m.row.run_id: predicted for m in at})
        series.points.append(_point(gpus, at, predicted))
    speedups(series.points, first.row.scaling == "weak")
    hidden = (
        f"{overlap:.0%} of communication taken as hidden under compute (measured in the multi-process runs' timing)"
        if overlap is not None
        else "no overlap measured yet: communication counted as fully exposed, an upper bound"
    )
    carried = fabric.carried(session, [m.row.run_id for m in members if m.spec.gpus > 1])
    fitted = (
        "the latency-bandwidth fits per tier its scaling card carries (measured on the cluster it was exported from)"
        if carried
        else "the fabric's latency-bandwidth fits per tier"
    )
    series.basis = (
        f"compute from run {reference.row.run_id} (1 process, {reference.spec.global_batch_size} samples per step), "
        f"scaled by each rank's samples and share of the model; communication from {fitted}; {hidden}"
    )
    return series, used, by_run


def _predicted(session: Session, items: Sequence[measures.Measured]) -> _Predicted:
    grouped: dict[str, list[measures.Measured]] = {}
    for item in items:
        if item.spec.reads("global_batch_size"):  # the worker's runs: a program's work is its own
            grouped.setdefault(item.row.series, []).append(item)
    series: list[ModelSeries] = []
    fits: dict[Tier, AlphaBeta] = {}
    by_run: dict[str, StepPrediction] = {}
    for name, members in grouped.items():
        one, used, predicted = _series(session, name, members, items)
        series.append(one)
        fits.update(used)
        by_run.update(predicted)
    return _Predicted(series, fits, by_run)


def annotate(session: Session, items: Sequence[measures.Measured]) -> None:
    """Each row's predicted step, and `off_model` where a measured step is slower than that by more than the
    tolerance (the setting prediction_tolerance)."""
    tolerance = get_settings().prediction_tolerance
    for run_id, predicted in _predicted(session, items).by_run.items():
        item = next(item for item in items if item.row.run_id == run_id)
        item.row.predicted_step_time_s = predicted.step_s
        step = breakdown(item.row)
        if item.spec.gpus == 1 or step is None or item.row.step_time_s is None:
            continue
        off = residual(predicted, step)
        flag = flags.check_off_model(
            item.spec.gpus,
            item.row.step_time_s,
            predicted.step_s,
            off.compute_excess_s,
            off.comm_excess_s,
            tolerance,
        )
        if flag is not None:
            item.row.flags = flags.worst_first([*item.row.flags, flag])


def prediction(session: Session, selection: Selection, experiment_id: str | None = None) -> PredictionPublic:
    """The step model's answer for a selection: per series its predicted and measured points."""
    items, _ = measures.measured(session, selection)
    form_series(items)
    predicted = _predicted(session, items)
    fits = [
        FabricFitPublic(tier=tier.value, alpha_s=fit.alpha_s, beta_bytes_per_s=fit.beta_bytes_per_s)
        for tier, fit in sorted(predicted.fits.items())
    ]
    return PredictionPublic(
        experiment_id=experiment_id,
        tolerance=get_settings().prediction_tolerance,
        fits=fits,
        series=predicted.series,
    )
