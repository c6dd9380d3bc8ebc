"""Per-run figures side by side, grouped into scaling series and points (a series at one GPU count, over its
repeats), with speed-up and efficiency against each series' smallest point, the flags that say which figures
cannot be trusted and why, and per series the fitted scaling laws."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any, NamedTuple

from sqlalchemy import String, cast
from sqlalchemy import select as sa_select  # sqlmodel's select takes at most four columns
from sqlmodel import Session, col, or_, select

from contract.program import PARAM_PREFIX
from contract.records import EpochRecord, StartRecord, memory_measure
from contract.spec import RunSpec
from contract.states import RunState
from server.errors import Invalid
from server.models import (
    TIME_PARTS,
    AmdahlFitPublic,
    ComparePublic,
    CompareRow,
    EpochPoint,
    Experiment,
    Flag,
    Metric,
    PredictedPoint,
    Run,
    RunAccounting,
    RunResources,
    RunSummary,
    ScalingFits,
    ScalingMode,
    ScalingPoint,
    ScalingPublic,
    ScalingSeries,
    User,
    UslFitPublic,
)
from server.services import flags, programs, scaling_laws, statistics, visibility
from server.services.read_cache import Answer, FinishedVersion, Memo, as_json, finished_version

# A scaling series holds every spec field fixed but these; the seed only tells repeats apart.
_SCALED_FIELDS = frozenset({"gpus", "nodes", "seed"})
# Weak scaling grows the global batch with the GPUs.
_WEAK_SCALED_FIELDS = _SCALED_FIELDS | {"global_batch_size"}
# Strategies train the same model when these alone differ (the worker's equivalence tests compare them).
_LAYOUT_FIELDS = frozenset(
    {"strategy", "gpus", "nodes", "tp_degree", "pp_schedule", "microbatches", "fsdp_sharding", "compile",
     "activation_checkpointing", "step_log_every", "checkpoint_every"}
)  # fmt: skip
# The relative difference of losses the worker's equivalence tests allow (tests/worker/test_parallel.py), per
# precision: half precision rounds differently with every layout.
LOSS_TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 2e-2}


@dataclass
class _Measured:
    """One run's row, with what the points and flags are built from."""

    row: CompareRow
    spec: RunSpec
    series_key: str
    time_s: float | None = None  # what its point compares: epoch time (strong) or step time (weak)
    first_loss: float | None = None  # the training loss of its first epoch
    run_flags: list[Flag] = field(default_factory=list)
    loss_key: str = ""  # runs that should have trained the same model share it (_add_loss_mismatches)


@dataclass(frozen=True)
class _RunFigures:
    """What a run's comparison row owes to the run alone (its spec, records, summary and scaling mode), before the
    selection's points, series names and cross-run flags: kept for a finished run, since they cannot change."""

    measured: _Measured  # a template: each comparison works on a copy
    epochs: list[EpochPoint]
    start: StartRecord | None

    def fresh(self) -> _Measured:
        kept = self.measured
        return dataclasses.replace(kept, row=kept.row.model_copy(), run_flags=list(kept.run_flags))


# Finished runs' figures, by (finished version, state, scaling mode): a dashboard polled every few seconds reads
# each run's records once. The reads of the records and their validation were most of a comparison's cost.
_figures: Memo[_RunFigures] = Memo()


def compare_rows(
    session: Session, *, experiment_ids: Collection[str] = (), run_ids: Collection[str] = ()
) -> list[CompareRow]:
    """The runs of these experiments and these runs, with scaling figures and flags computed within the selection."""
    return _compared(session, _selection(session, experiment_ids, run_ids))[0]


# A run as a selection reads it first: what says whether its figures may be kept, and under which key.
class _Head(NamedTuple):
    run_id: str
    experiment_id: str
    key: tuple[FinishedVersion, RunState, ScalingMode] | None  # None: its figures may still change
    accounting: tuple[str | None, ...]  # its accounting as stored (all None: none yet), which a kept answer holds


class _Selection(NamedTuple):
    heads: list[_Head]  # in the comparison's order
    modes: dict[str, ScalingMode]  # experiment id -> its scaling mode


_HEAD_COLUMNS = [col(column) for column in (Run.id, Run.experiment_id, Run.state, Run.attempt, Run.log_offset)]
_ACCOUNTING_AS_STORED = [cast(column, String) for column in RunAccounting.__table__.columns]  # type: ignore[attr-defined]


def _selection(
    session: Session, experiment_ids: Collection[str], run_ids: Collection[str], viewer: User | None = None
) -> _Selection:
    """The runs of these experiments and these runs (only those the viewer may see, if given), with their accounting
    as stored, in one query: each list of ids in a query's IN is written out again at every execution, and for a
    dashboard of 200 runs three such queries were most of what its kept answer cost."""
    query = (
        sa_select(*_HEAD_COLUMNS, col(Run.ingest_done), *_ACCOUNTING_AS_STORED)
        .join_from(Run, RunAccounting, RunAccounting.run_id == Run.id, isouter=True)  # type: ignore[arg-type]
        .where(or_(col(Run.experiment_id).in_(experiment_ids), col(Run.id).in_(run_ids)))
        .order_by(col(Run.created_at), col(Run.position))
    )
    found = session.execute(query if viewer is None else visibility.only_visible(query, viewer, Run.experiment_id))
    rows = found.all()
    modes = _scaling_modes(session, {row[1] for row in rows})
    heads = []
    for run_id, experiment_id, state, attempt, log_offset, ingest_done, *accounting in rows:
        finished = finished_version(run_id, attempt, log_offset, ingest_done)
        key = None if finished is None else (finished, state, modes.get(experiment_id, "strong"))
        heads.append(_Head(run_id, experiment_id, key, tuple(accounting)))
    return _Selection(heads, modes)


def _compared(session: Session, selection: _Selection) -> tuple[list[CompareRow], dict[str, list[EpochPoint]]]:
    """The selection's rows, and each run's epochs that count."""
    figures: dict[str, _RunFigures] = {}
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
    measured: list[_Measured] = []
    specs: dict[str, RunSpec] = {}
    for run_id in ids:
        kept = figures[run_id]
        item = kept.fresh()
        specs.setdefault(item.series_key, item.spec)
        if (accounting := accounted.get(run_id)) is not None:
            item.row.resources = _resources(accounting, kept.start, kept.epochs, item.spec)
            if accounting.shared_with:
                item.run_flags.append(flags.shared_node(accounting.shared_with))
        measured.append(item)
    names = _series_names(specs)
    by_series: dict[str, list[_Measured]] = defaultdict(list)
    for item in measured:
        item.row.series = names[item.series_key]
        by_series[item.series_key].append(item)
    for members in by_series.values():
        _add_points(members)
    _add_loss_mismatches(measured)
    for item in measured:
        item.row.flags = flags.worst_first([*item.run_flags, *item.row.flags])
    return [item.row for item in measured], {run_id: figures[run_id].epochs for run_id in ids}


def _figures_of(session: Session, run_ids: Collection[str], modes: Mapping[str, ScalingMode]) -> dict[str, _RunFigures]:
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
    made = {}
    for run, summary in pairs:
        spec = RunSpec.model_validate(run.spec)
        mode = modes.get(run.experiment_id, "strong")
        item = _measure(run, spec, summary or RunSummary(run_id=run.id), histories[run.id], mode,
                        _series_key(spec, mode))  # fmt: skip
        item.run_flags += _hardware_flags(starts.get(run.id))
        item.loss_key = run.experiment_id + spec.model_dump_json(exclude=set(_LAYOUT_FIELDS))
        made[run.id] = _RunFigures(item, histories[run.id], starts.get(run.id))
    return made


def _scaling_modes(session: Session, experiment_ids: Collection[str]) -> dict[str, ScalingMode]:
    requests = session.exec(select(Experiment.id, Experiment.request).where(col(Experiment.id).in_(experiment_ids)))
    return {
        experiment_id: "weak" if request.get("scaling") == "weak" else "strong" for experiment_id, request in requests
    }


def _start_records(session: Session, run_ids: Collection[str]) -> dict[str, StartRecord]:
    """Each run's last start record (a requeued job starts again, perhaps elsewhere)."""
    records = session.exec(
        select(Metric.run_id, Metric.record)
        .where(col(Metric.run_id).in_(run_ids), Metric.kind == "start")
        .order_by(col(Metric.run_id), col(Metric.offset))
    )
    return {run_id: StartRecord.model_validate(record) for run_id, record in records}


def _series_names(specs: dict[str, RunSpec]) -> dict[str, str]:
    """Name each series by its strategy and the fields, other than scaled ones, whose values differ between series;
    a weak-scaling series says so when strong ones are beside it."""
    dumps = {key: _described(spec, _scaled(key)) for key, spec in specs.items()}
    weak_beside_strong = len({_mode(key) for key in dumps}) > 1
    # Fields are compared within a kind: a program's have nothing to say against the worker's, and the kind
    # itself tells the two apart. Within one, a field only some series have (a parameter) differs.
    kinds: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for dump in dumps.values():
        kinds[dump["kind"]].append(dump)
    differing = {"kind"} if len(kinds) > 1 else set()
    for same in kinds.values():
        fields = {name for dump in same for name in dump}
        differing |= {name for name in fields if len({json.dumps(d.get(name)) for d in same}) > 1}
    varying = sorted(differing - {"strategy"})
    names = {}
    for key, dump in dumps.items():
        parts = [dump["strategy"], *(f"{name}={json.dumps(dump[name])}" for name in varying if name in dump)]
        parts += ["weak scaling"] if weak_beside_strong and _mode(key) == "weak" else []
        names[key] = ", ".join(parts).replace('"', "")
    return names


def _described(spec: RunSpec, scaled: frozenset[str]) -> dict[str, Any]:
    """The fields that may tell a run's series from another's: a program's parts each by name, and its parameters
    as params.NAME, so that a series is named `ddp, params.lr=0.1` rather than by its whole program."""
    if spec.program is None:
        return spec.model_dump(mode="json", exclude=set(scaled))
    settings = {name: value for name, value in spec.settings().items() if name not in scaled | {"program"}}
    program = spec.program.model_dump(mode="json", exclude={"params"})
    return {**settings, **program, **{PARAM_PREFIX + name: value for name, value in spec.program.params.items()}}


def _series_key(spec: RunSpec, mode: ScalingMode) -> str:
    return f"{mode}:" + spec.model_dump_json(exclude=set(_WEAK_SCALED_FIELDS if mode == "weak" else _SCALED_FIELDS))


def _mode(key: str) -> ScalingMode:
    return "weak" if key.startswith("weak:") else "strong"


def _scaled(key: str) -> frozenset[str]:
    return _WEAK_SCALED_FIELDS if _mode(key) == "weak" else _SCALED_FIELDS


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
    run: Run, spec: RunSpec, summary: RunSummary, epochs: list[EpochPoint], mode: ScalingMode, series_key: str
) -> _Measured:
    """The run's row, its within-run figures (median of the timed epochs and their spread) and its own flags."""
    spread = statistics.epoch_spread([epoch.epoch_time_s for epoch in epochs])
    timed = statistics.timed_epochs(epochs)
    median_epoch = _median_epoch(timed, spread.median if spread else None)
    # What the run's kind reads: a program's batch and epochs are its own, unknown to its spec.
    global_batch = spec.global_batch_size if spec.reads("global_batch_size") else None
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
    )
    item = _Measured(row, spec, series_key, spread.median if mode == "strong" and spread else step_time)
    item.first_loss = epochs[0].train_loss if epochs and epochs[0].epoch == 1 else None
    item.run_flags += _run_flags(run, spec, summary, epochs, row)
    return item


def _median_epoch(timed: list[EpochPoint], median_s: float | None) -> EpochPoint | None:
    """The timed epoch whose time is the median's (the lower middle one for an even count)."""
    if median_s is None or not timed:
        return None
    return min(timed, key=lambda epoch: abs(epoch.epoch_time_s - median_s))


def _run_flags(run: Run, spec: RunSpec, summary: RunSummary, epochs: list[EpochPoint], row: CompareRow) -> list[Flag]:
    raised = []
    final = run.state.is_final
    planned = spec.epochs if spec.reads("epochs") else None  # none for a program: how many it runs is its own
    if planned is not None and summary.epochs_done < planned and (final or summary.epochs_done):
        raised.append(flags.incomplete(summary.epochs_done, planned, final))
    if run.ingest_done and programs.silent(run, summary.epochs_done):
        raised.append(flags.no_metrics())
    times = [epoch.epoch_time_s for epoch in epochs]
    # A live run is too short only once it has timed enough epochs to say so for sure.
    judged = final or len(times) > statistics.MIN_TIMED_EPOCHS
    if times and judged and (reason := statistics.too_short(times[1:])):
        raised.append(flags.too_short(reason))
    median_s = row.mean_epoch_time_s
    if len(times) > 1 and median_s is not None and statistics.warmup_dominated(times[0], median_s, len(times) - 1):
        raised.append(flags.warmup_dominated(times[0], sum(times[1:])))
    slowest, fastest = row.step_time_slowest_s, row.step_time_fastest_s
    if slowest and fastest and slowest / fastest > flags.STRAGGLER:
        raised.append(flags.straggler(slowest, fastest))
    return raised


def _hardware_flags(start: StartRecord | None) -> list[Flag]:
    """Oversubscribed when, on some node, the run's processes x their threads exceed the CPUs they were given."""
    if start is None or not start.nodes_hardware:
        return []
    crowded = [node for node in start.nodes_hardware if node.oversubscribed]
    if not crowded:
        return []
    worst = max(crowded, key=lambda node: len(node.ranks) * node.intra_op_threads / node.cpus_given)
    return [
        flags.oversubscribed(
            [node.host for node in crowded], len(worst.ranks), worst.intra_op_threads, worst.cpus_given
        )
    ]


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
    )


# Accounting's names for the figures that RunResources names otherwise.
_RESOURCE_NAMES = {"gpu_util": "gpu_utilization", "gpu_mem_bytes": "gpu_memory_bytes"}


def _add_points(members: list[_Measured]) -> None:
    """Gather the series' runs into points by GPU count: mean and interval over repeats, speed-up and efficiency
    against the point with the fewest GPUs, and the point flags (superlinear, noisy) on each of its runs."""
    by_gpus: dict[int, list[_Measured]] = defaultdict(list)
    for item in members:
        if item.time_s:
            by_gpus[item.row.gpus].append(item)
    if not by_gpus:
        return
    points = {
        gpus: statistics.point(gpus, [item.time_s for item in items if item.time_s]) for gpus, items in by_gpus.items()
    }
    baseline = points[min(points)]
    noisy = statistics.noisy(list(points.values()))
    weak = members[0].row.scaling == "weak"
    for gpus, items in by_gpus.items():
        point = points[gpus]
        ratio = gpus / baseline.gpus
        low, high = _ratio_bounds(baseline, point)
        if weak:
            efficiency = baseline.mean / point.mean
            speedup, speedup_low, speedup_high = efficiency * ratio, _times(low, ratio), _times(high, ratio)
        else:
            speedup, speedup_low, speedup_high = baseline.mean / point.mean, low, high
            efficiency = speedup / ratio
        point_flags = []
        if efficiency > flags.SUPERLINEAR:
            point_flags.append(flags.superlinear(efficiency, gpus, baseline.gpus))
        if gpus in noisy:
            point_flags.append(flags.noisy(gpus, point.n))
        for item in items:
            item.row.speedup, item.row.efficiency = speedup, efficiency
            item.row.speedup_ci_low, item.row.speedup_ci_high = speedup_low, speedup_high
            item.row.point_mean_s, item.row.point_n = point.mean, point.n
            item.row.point_ci_low_s, item.row.point_ci_high_s = point.ci_low, point.ci_high
            item.row.baseline_gpus = baseline.gpus
            item.row.flags = point_flags


def _ratio_bounds(baseline: statistics.Point, point: statistics.Point) -> tuple[float | None, float | None]:
    """Speed-up's interval from the two points' intervals: the slowest baseline over the fastest point, and back
    (conservative: both ends at once); None where neither point has an interval."""
    if point.ci_low is None and baseline.ci_low is None:
        return None, None
    base_low = baseline.ci_low if baseline.ci_low is not None else baseline.mean
    base_high = baseline.ci_high if baseline.ci_high is not None else baseline.mean
    low = point.ci_low if point.ci_low is not None else point.mean
    high = point.ci_high if point.ci_high is not None else point.mean
    return (base_low / high if high > 0 else None), (base_high / low if low > 0 else None)


def _times(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _add_loss_mismatches(measured: list[_Measured]) -> None:
    """Runs that should have trained the same model (same experiment, seed, data, global batch, precision...;
    only the layout differs) whose first epochs' training losses lie further apart than the equivalence tests allow.

    The first epoch, not the last: the equivalence tests compare 20 steps, and over a whole run rounding alone
    compounds (the README's example: first epochs equal to 1e-7 on 1, 2 and 4 processes, last epochs 7e-5 and 6e-3
    apart), while a layout that trains another model shows at once."""
    groups: dict[str, list[tuple[float, _Measured]]] = defaultdict(list)
    for item in measured:
        # A program's runs need not train the same model on every layout (its batch may grow with the GPUs): the
        # equivalence this flag stands on is the worker's.
        if item.first_loss is not None and item.spec.program is None:
            groups[item.loss_key].append((item.first_loss, item))
    for members in groups.values():
        # The reference: the run with the fewest GPUs, the first of them in the experiment's order on a tie.
        expected, reference = min(members, key=lambda pair: pair[1].row.gpus)
        tolerance = LOSS_TOLERANCE[reference.spec.precision.value]
        for loss, item in members:
            if abs(loss - expected) > tolerance * max(abs(expected), 1e-12):
                item.run_flags.append(flags.loss_mismatch(loss, expected, reference.row.run_id, tolerance))


def scaling(rows: Iterable[CompareRow], experiment_id: str | None = None) -> ScalingPublic:
    """Per series: its points, the laws fitted to their speed-ups, the curves to 4x the largest count, and what
    they mean."""
    by_series: dict[str, list[CompareRow]] = defaultdict(list)
    every: list[Flag] = []
    for row in rows:
        by_series[row.series].append(row)
        every += row.flags
    return ScalingPublic(
        experiment_id=experiment_id,
        series=[_series(name, members) for name, members in by_series.items()],
        flags=flags.worst_first(every),
    )


def _series(name: str, rows: list[CompareRow]) -> ScalingSeries:
    points: dict[int, ScalingPoint] = {}
    for row in rows:
        if row.point_mean_s is None or row.gpus in points:
            continue
        points[row.gpus] = ScalingPoint(
            gpus=row.gpus,
            mean=row.point_mean_s,
            ci_low=row.point_ci_low_s,
            ci_high=row.point_ci_high_s,
            n=row.point_n,
            speedup=row.speedup,
            speedup_ci_low=row.speedup_ci_low,
            speedup_ci_high=row.speedup_ci_high,
            efficiency=row.efficiency,
            flags=[flag for flag in row.flags if flag.code in ("superlinear", "noisy")],
        )
    ordered = [points[gpus] for gpus in sorted(points)]
    measured = [(point.gpus, point.speedup) for point in ordered if point.speedup is not None]
    fits = scaling_laws.fit([gpus for gpus, _ in measured], [speedup for _, speedup in measured])
    baseline = rows[0].baseline_gpus
    predicted = (
        scaling_laws.predict(fits, ordered[0].gpus, ordered[-1].gpus * 4) if ordered and not fits.refused else []
    )
    recommendation = (
        scaling_laws.recommendation(fits, ordered[0].gpus, ordered[-1].gpus)
        if ordered
        else "No timed runs yet: nothing to fit."
    )
    return ScalingSeries(
        series=name,
        strategy=rows[0].strategy,
        scaling=rows[0].scaling,
        measure="step_time_s" if rows[0].scaling == "weak" else "epoch_time_s",
        baseline_gpus=baseline,
        points=ordered,
        fits=ScalingFits(
            amdahl=AmdahlFitPublic(**vars(fits.amdahl)) if fits.amdahl else None,
            usl=UslFitPublic(**vars(fits.usl)) if fits.usl else None,
            refused=fits.refused,
        ),
        predicted=[PredictedPoint(gpus=p.gpus, law=p.law, speedup=p.speedup) for p in predicted],
        recommendation=recommendation,
    )


def compare_csv(rows: list[CompareRow]) -> str:
    """The rows as CSV with a header of the field names; a missing figure is an empty cell. Flags are one cell
    ("code: message" lines); the time breakdown and the resources one column per part; the custom metrics one
    column `metric.NAME` each, for the names the rows have, after the rest (so that the columns of a selection
    without them stay those that scripts of earlier versions read)."""
    names = sorted({name for row in rows for name in row.metrics})
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=_csv_columns(names), lineterminator="\n")
    writer.writeheader()
    writer.writerows(_flat(row.model_dump(mode="json")) for row in rows)
    return buffer.getvalue()


def _csv_columns(metric_names: list[str]) -> list[str]:
    nested = {
        "time_breakdown": [f"time_breakdown.{part}" for part in TIME_PARTS],
        "resources": [f"resources.{name}" for name in RunResources.model_fields],
        "metrics": [],
    }
    fixed = [column for name in CompareRow.model_fields for column in nested.get(name, [name])]
    return fixed + [f"{METRIC_COLUMN}{name}" for name in metric_names]


def _flat(dump: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in dump.items():
        if name == "flags":
            flat[name] = "\n".join(f"{flag['code']}: {flag['message']}" for flag in value)
        elif name in ("time_breakdown", "resources"):
            flat.update({f"{name}.{part}": _cell(inner) for part, inner in (value or {}).items()})
        elif name == "metrics":
            flat.update({f"{METRIC_COLUMN}{metric}": figure for metric, figure in value.items()})
        else:
            flat[name] = _cell(value)
    return flat


def _cell(value: Any) -> Any:
    return " ".join(map(str, value)) if isinstance(value, list) else value


# Custom metrics' columns: `metric.grad_norm`.
METRIC_COLUMN = "metric."
# A dashboard of more runs than this is unreadable, and the answer would grow without bound.
MAX_RUNS = 500
MAX_EXPERIMENTS = 50


def selected_rows(
    session: Session, experiment_ids: Collection[str], run_ids: Collection[str], viewer: User
) -> list[CompareRow]:
    """The comparison rows of a selection that names only existing runs and experiments the viewer may see (one
    the viewer may not see is named as one that does not exist), at most MAX_RUNS of them."""
    return _compared(session, _checked_selection(session, experiment_ids, run_ids, viewer))[0]


# Whole answers for selections of finished runs only, by what every figure in them is made from: the runs' keys
# in order, their accounting as stored, and the question. A dashboard of ended runs is then one lookup.
_answers: Memo[Answer] = Memo(2_000, weigh=len, budget=64 * 2**20)


def compare_answer(
    session: Session, experiment_ids: Collection[str], run_ids: Collection[str], viewer: User, history: bool
) -> Answer:
    """ComparePublic's JSON for the selection (as selected_rows checks it), with each run's epochs if asked."""
    selection = _checked_selection(session, experiment_ids, run_ids, viewer)
    only = next(iter(experiment_ids)) if len(experiment_ids) == 1 and not run_ids else None

    def make() -> Answer:
        rows, histories = _compared(session, selection)
        answer = ComparePublic(experiment_id=only, data=rows, count=len(rows), histories=histories if history else None)
        return Answer(as_json(answer))

    if any(head.key is None for head in selection.heads):
        return make()
    return _answers.get((tuple((head.key, head.accounting) for head in selection.heads), only, history), make)


def _checked_selection(
    session: Session, experiment_ids: Collection[str], run_ids: Collection[str], viewer: User
) -> _Selection:
    if not experiment_ids and not run_ids:
        raise Invalid([(("query", "run_id"), "name at least one run_id or experiment_id")])
    selection = _selection(session, experiment_ids, run_ids, viewer)
    # A run named is missing from a selection of what the viewer may see only if it does not exist or is not
    # theirs to see: both are answered alike.
    _refuse_unknown(set(run_ids) - {head.run_id for head in selection.heads}, "run_id")
    _require_experiments(session, experiment_ids, viewer)
    if len(selection.heads) > MAX_RUNS:
        too_many = f"the selection holds {len(selection.heads)} runs; compare at most {MAX_RUNS}"
        raise Invalid([(("query", "experiment_id"), too_many)])
    return selection


def _require_experiments(session: Session, experiment_ids: Collection[str], viewer: User) -> None:
    """A selection naming an experiment that does not exist (or the viewer may not see) is refused."""
    named = select(Experiment.id).where(col(Experiment.id).in_(experiment_ids))
    found: set[str] = set(session.exec(visibility.only_visible(named, viewer, Experiment.id)))
    _refuse_unknown(set(experiment_ids) - found, "experiment_id")


def _refuse_unknown(unknown: Collection[str], field: str) -> None:
    """Refused, naming the parameter and the first few unknown ids."""
    if unknown:
        missing = sorted(unknown)
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        what = field.removesuffix("_id")
        raise Invalid([(("query", field), f"no {what} {', '.join(map(repr, missing[:3]))}{more}")])
