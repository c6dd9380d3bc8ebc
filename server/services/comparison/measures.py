"""Each run's measure: its comparison row (figures from its spec, summary, records and Slurm's accounting), the
epochs that count, and the flags it raises on its own; kept for a finished run, whose figures cannot change."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from sqlmodel import Session, col, select

from contract.records import ComputeRecord, EpochRecord, StartRecord, WorkdirRecord, current_start, memory_measure
from contract.spec import RunSpec
from contract.states import RunState
from server.models import (
    CompareRow,
    EpochPoint,
    Experiment,
    Flag,
    Metric,
    Run,
    RunAccounting,
    RunResources,
    RunSummary,
    ScalingMode,
    isolation_of,
)
from server.services import fabric, flags, launches, programs, statistics, targets, utilization
from server.services.comparison.selection import Selection
from server.services.comparison.series import series_key
from server.services.kept_records import records_by_run
from server.services.read_cache import Memo


@dataclass
class Measured:
    """One run's row, with what the points and flags are built from."""

    row: CompareRow
    spec: RunSpec
    series_key: str
    first_loss: flags.FirstLoss  # what the loss mismatch compares
    time_s: float | None = None  # what its point compares: epoch time (strong) or step time (weak)
    # What its point compares where its series is measured by run time: a completed run's (a failed one's time is
    # that of its failure).
    run_time_s: float | None = None
    run_flags: list[Flag] = field(default_factory=list)
    workdir: flags.WorkdirUse | None = None  # what a program's run found and wrote in a shared workdir


@dataclass(frozen=True)
class RunFigures:
    """What a run's comparison row owes to the run alone (its spec, records, summary and scaling mode), before the
    selection's points, series names and cross-run flags: kept for a finished run, since they cannot change."""

    measured: Measured  # a template: each comparison works on a copy
    epochs: list[EpochPoint]
    start: StartRecord | None

    def fresh(self) -> Measured:
        kept = self.measured
        return dataclasses.replace(kept, row=kept.row.model_copy(), run_flags=list(kept.run_flags))


# Finished runs' figures, by (finished version, state, scaling mode): a dashboard polled every few seconds reads
# each run's records once. The reads of the records and their validation were most of a comparison's cost.
_figures: Memo[RunFigures] = Memo()


def measured(session: Session, selection: Selection) -> tuple[list[Measured], dict[str, list[EpochPoint]]]:
    """The selection's runs measured (each a fresh copy, to be given its series and point), in the selection's
    order, with Slurm's figures; and each run's epochs that count."""
    figures: dict[str, RunFigures] = {}
    for head in selection.heads:
        if head.key is not None and (kept := _figures.peek(head.key)) is not None:
            figures[head.run_id] = kept
    missing = [head for head in selection.heads if head.run_id not in figures]
    made = _figures_of(session, [head.run_id for head in missing], selection.modes)
    for head in missing:
        if head.run_id in made:
            figures[head.run_id] = made[head.run_id]
            if head.key is not None:
                _figures.put(head.key, made[head.run_id])
    # A run deleted between the two reads is left out.
    ids = [head.run_id for head in selection.heads if head.run_id in figures]
    accounted = {
        row.run_id: row for row in session.exec(select(RunAccounting).where(col(RunAccounting.run_id).in_(ids)))
    }
    exclusive = _exclusive_experiments(session, selection, accounted)
    degraded = fabric.degraded_flags(session, ids)
    items: list[Measured] = []
    for run_id in ids:
        kept = figures[run_id]
        item = kept.fresh()
        if (accounting := accounted.get(run_id)) is not None:
            item.row.resources = _resources(accounting, kept.start, kept.epochs, item.spec)
            shared = flags.check_shared_node(accounting.shared_with, item.row.experiment_id in exclusive)
            if shared is not None:
                item.run_flags.append(shared)
            beyond = flags.check_cpus_beyond_allocation(accounting.cpu_efficiency, accounting.alloc_cpus)
            if beyond is not None:
                item.run_flags.append(beyond)
        item.run_flags += degraded.get(run_id, [])
        items.append(item)
    return items, {run_id: figures[run_id].epochs for run_id in ids}


def _exclusive_experiments(session: Session, selection: Selection, accounted: Mapping[str, RunAccounting]) -> set[str]:
    """Of the experiments whose runs shared their nodes with other jobs, those that asked for isolation exclusive
    (the shared_node flag then advises something else): read only where a run did share, which is rare."""
    shared = {head.experiment_id for head in selection.heads if (row := accounted.get(head.run_id)) and row.shared_with}
    if not shared:
        return set()
    requests = session.exec(select(Experiment.id, Experiment.request).where(col(Experiment.id).in_(shared)))
    return {experiment_id for experiment_id, request in requests if isolation_of(request) == "exclusive"}


def _figures_of(session: Session, run_ids: Collection[str], modes: Mapping[str, ScalingMode]) -> dict[str, RunFigures]:
    """Each run's own figures, read from its row, summary and records."""
    if not run_ids:
        return {}
    pairs = session.exec(
        select(Run, RunSummary)
        .join(RunSummary, RunSummary.run_id == Run.id, isouter=True)  # type: ignore[arg-type]
        .where(col(Run.id).in_(run_ids))
    ).all()
    histories = epoch_histories(session, run_ids)
    starts = _start_records(session, run_ids)
    workdirs = _workdir_records(session, run_ids)
    timed = launches.launch_records(session, run_ids)
    # The latest probe of each run: a requeued job probes again, perhaps on another device.
    computes = {run_id: runs[-1] for run_id, runs in records_by_run(session, run_ids, "compute", ComputeRecord).items()}
    made = {}
    for run, summary in pairs:
        spec = RunSpec.model_validate(run.spec)
        mode = modes.get(run.experiment_id, "strong")
        start = starts.get(run.id)
        run_time = launches.run_time(timed.get(run.id, []), run.state.is_final)
        summary = summary or RunSummary(run_id=run.id)
        item = _measure(run, spec, summary, histories[run.id], mode, start, run_time, computes.get(run.id))
        item.workdir = _workdir_use(run, workdirs.get(run.id, []))
        made[run.id] = RunFigures(item, histories[run.id], start)
    return made


def _start_records(session: Session, run_ids: Collection[str]) -> dict[str, StartRecord]:
    """Each run's current start (a requeued job starts again, perhaps elsewhere; a program's own start record keeps
    the hardware its batch script measured: current_start)."""
    starts = records_by_run(session, run_ids, "start", StartRecord)
    return {run_id: start for run_id, runs in starts.items() if (start := current_start(runs)) is not None}


def _workdir_records(session: Session, run_ids: Collection[str]) -> dict[str, list[WorkdirRecord]]:
    """Each program run's workdir records in output order (none where it started in its own directory)."""
    return records_by_run(session, run_ids, "workdir", WorkdirRecord)


def _workdir_use(run: Run, records: list[WorkdirRecord]) -> flags.WorkdirUse | None:
    """What the run found at its latest start and wrote over all its starts (a requeued job starts again)."""
    if not records:
        return None
    starts = [record for record in records if record.phase == "start"]

    def versions(record: WorkdirRecord) -> set[flags.FileVersion]:
        return {(file.name, file.mtime_ns, file.bytes) for file in record.files if file.mtime_ns is not None}

    found = versions(starts[-1]) if starts else set()
    wrote = set().union(*(versions(record) for record in records if record.phase == "end"))
    return flags.WorkdirUse(run.id, run.experiment_id, frozenset(found), frozenset(wrote))


def epoch_histories(session: Session, run_ids: Collection[str]) -> dict[str, list[EpochPoint]]:
    """Each run's epochs that count, in order: ingestion decided which (after starts and resumes) as it stored them."""
    histories: dict[str, list[EpochPoint]] = {run_id: [] for run_id in run_ids}
    records = session.exec(
        select(Metric.run_id, Metric.record)
        .where(col(Metric.run_id).in_(run_ids), Metric.kind == "epoch", col(Metric.counts))
        .order_by(col(Metric.run_id), col(Metric.epoch))
    )
    for run_id, record in records:
        # A record's own `metrics` field, if a program printed one, is one of its figures or nothing, never these.
        histories[run_id].append(EpochPoint.model_validate({**record, "metrics": custom_metrics(record)}))
    return histories


# Read once: pydantic's class attribute model_fields is a deprecated property, costly enough to be a tenth of a
# comparison when read for every field of every epoch.
_DECLARED_EPOCH_FIELDS = frozenset(EpochRecord.model_fields)


def custom_metrics(record: Mapping[str, Any]) -> dict[str, float]:
    """An epoch record's own figures: the numeric fields EpochRecord does not declare (a program's, or a course
    line's); not flags (booleans), nor what JSON cannot carry (NaN, infinities)."""
    return {
        name: float(value)
        for name, value in record.items()
        if name not in _DECLARED_EPOCH_FIELDS
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    }


def _step_time(epoch: EpochPoint, global_batch: int | None) -> float | None:
    if epoch.step_time_s is not None or global_batch is None:
        return epoch.step_time_s
    return global_batch / epoch.samples_per_s if epoch.samples_per_s else None


def _measure(
    run: Run,
    spec: RunSpec,
    summary: RunSummary,
    epochs: list[EpochPoint],
    mode: ScalingMode,
    start: StartRecord | None,
    run_time: launches.RunTime,
    compute: ComputeRecord | None = None,
) -> Measured:
    """The run's row, its within-run figures (median of the timed epochs and their spread) and its own flags."""
    spread = statistics.epoch_spread([epoch.epoch_time_s for epoch in epochs])
    timed = statistics.timed_epochs(epochs)
    median_epoch = _median_epoch(timed, spread.median if spread else None)
    # What the run's kind reads: a program's batch is its own, known only where it declares it.
    global_batch = spec.global_batch()
    step_times = [t for t in (_step_time(epoch, global_batch) for epoch in timed) if t is not None]
    step_time = median(step_times) if step_times else None
    row = CompareRow(
        run_id=run.id,
        experiment_id=run.experiment_id,
        series=spec.strategy,
        state=run.state,
        ingest_done=run.ingest_done,
        strategy=spec.strategy,
        gpus=spec.gpus,
        nodes=spec.nodes,
        global_batch_size=global_batch,
        epochs_done=summary.epochs_done,
        mean_epoch_time_s=spread.median if spread else None,
        speedup=None,
        efficiency=None,
        final_train_loss=summary.last_train_loss,
        final_val_loss=summary.last_val_loss,
        final_val_accuracy=summary.last_val_accuracy,
        samples_per_s=summary.last_samples_per_s,
        peak_memory_bytes=summary.peak_memory_bytes,
        memory_kind=summary.peak_memory_kind,
        memory_measure=memory_measure(summary.peak_memory_kind),
        peak_rss_bytes=summary.peak_rss_bytes,
        scaling=mode,
        seed=spec.seed,
        timed_epochs=spread.n if spread else 0,
        epoch_time_min_s=spread.low if spread else None,
        epoch_time_max_s=spread.high if spread else None,
        step_time_s=step_time,
        time_breakdown=median_epoch.time_breakdown if median_epoch else None,
        step_time_fastest_s=median_epoch.step_time_fastest_s if median_epoch else None,
        step_time_slowest_s=median_epoch.step_time_slowest_s if median_epoch else None,
        metrics=epochs[-1].metrics if epochs else {},
        run_time_s=run_time.seconds,
    )
    outcome = _target(row, spec, run.state, epochs)
    first_loss = flags.FirstLoss(
        run_id=run.id,
        same_model=flags.same_model(run.experiment_id, spec),
        gpus=spec.gpus,
        precision=spec.precision.value,
        loss=epochs[0].train_loss if epochs and epochs[0].epoch == 1 else None,
    )
    facts = flags.RunFacts(
        final=run.state.is_final,
        ingest_done=run.ingest_done,
        silent=programs.silent(run, summary.epochs_done),
        epochs_done=summary.epochs_done,
        planned_epochs=spec.epochs if spec.reads("epochs") else None,
        epoch_times=[epoch.epoch_time_s for epoch in epochs],
        median_epoch_s=row.mean_epoch_time_s,
        step_time_slowest_s=row.step_time_slowest_s,
        step_time_fastest_s=row.step_time_fastest_s,
        start=start,
        ingest_stopped=run.ingest_stopped,
        run_timed=run_time.seconds is not None,
        target=outcome,
    )
    time_s = spread.median if mode == "strong" and spread else step_time
    compared_run_time = run_time.seconds if run.state is RunState.completed else None
    used = utilization.run_utilization(spec, epochs, median_epoch, start, compute)
    utilization.write_row(row, used)
    raised = flags.run_flags(facts)
    if (impossible := utilization.check_impossible(used)) is not None:
        raised.append(impossible)
    return Measured(row, spec, series_key(spec, mode), first_loss, time_s, compared_run_time, raised)


def _target(row: CompareRow, spec: RunSpec, state: RunState, epochs: list[EpochPoint]) -> flags.TargetOutcome | None:
    """The run against its experiment's target, written on its row: reached or not, and where and when."""
    if spec.target is None:
        return None
    got = targets.run_target(spec.target, epochs)
    # Stopped at the target: the worker ends such a run at the end of the epoch that reached it, so its last counted
    # epoch is that one, and it did fewer than planned; it completed, and is complete.
    stopped = spec.stop_at_target and state is RunState.completed and got.at_last_epoch and len(epochs) < spec.epochs
    row.target = spec.target
    row.target_reached = got.reached
    row.epochs_to_target, row.time_to_target_s, row.stopped_at_target = got.epochs, got.time_s, stopped
    return flags.TargetOutcome(spec.target.describe(), got.reached, got.best, got.best_epoch, stopped)


def _median_epoch(timed: list[EpochPoint], median_s: float | None) -> EpochPoint | None:
    """The timed epoch whose time is the median's (the lower middle one for an even count)."""
    if median_s is None or not timed:
        return None
    return min(timed, key=lambda epoch: abs(epoch.epoch_time_s - median_s))


def _resources(
    accounting: RunAccounting, start: StartRecord | None, epochs: list[EpochPoint], spec: RunSpec
) -> RunResources:
    """Slurm's figures for the run, and what they cost per epoch and per sample."""
    on_gpus = start is not None and start.device == "cuda"
    devices = spec.gpus if on_gpus else accounting.alloc_cpus
    hours = accounting.elapsed_s * devices / 3600 if accounting.elapsed_s is not None and devices else None
    samples = sum(epoch.samples_per_s * epoch.epoch_time_s for epoch in epochs if epoch.samples_per_s)
    not_gathered = [_RESOURCE_NAMES.get(name, name) for name in accounting.not_gathered]
    if "energy_j" in not_gathered:
        not_gathered.append("energy_per_sample_j")
    # Gathered, but this run gave nothing to divide it by: a program that printed no epoch (or no samples/s).
    nothing_to_divide = [
        name
        for name, figure, divisor in (
            ("device_hours_per_epoch", hours, epochs),
            ("energy_per_sample_j", accounting.energy_j, samples),
        )
        if figure is not None and not divisor
    ]
    return RunResources(
        elapsed_s=accounting.elapsed_s,
        cpu_efficiency=accounting.cpu_efficiency,
        max_rss_bytes=accounting.max_rss_bytes,
        gpu_utilization=accounting.gpu_util,
        energy_j=accounting.energy_j,
        device_hours_per_epoch=hours / len(epochs) if hours is not None and epochs else None,
        device_kind="gpu" if on_gpus else "cpu",
        energy_per_sample_j=accounting.energy_j / samples if accounting.energy_j and samples else None,
        shared_with=accounting.shared_with,
        not_gathered=not_gathered,
        nothing_to_divide=nothing_to_divide,
    )


# Accounting's names for the figures that RunResources names otherwise.
_RESOURCE_NAMES = {"gpu_util": "gpu_utilization", "gpu_mem_bytes": "gpu_memory_bytes"}
