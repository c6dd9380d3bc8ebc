"""Scaling series and their points: which runs form a series and its name, each point's figure over its repeats
with speed-up and efficiency against the series' smallest point, each point's medians of the figures given per run,
and per series the fitted scaling laws."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from contract.program import PARAM_PREFIX
from contract.spec import RunSpec
from contract.states import RunState
from contract.target import LrScaling
from server.models import (
    AmdahlFitPublic,
    CompareRow,
    Flag,
    Measure,
    PointMedians,
    PredictedPoint,
    RunResources,
    ScalingFits,
    ScalingMode,
    ScalingPoint,
    ScalingPublic,
    ScalingSeries,
    UslFitPublic,
)
from server.models.compare import TIME_PARTS
from server.services import advice, flags, scaling_laws, statistics
from server.services.comparison import target_series

# How a series name calls a program's env variable: env.NAME (its value never shown, see _series_names).
_ENV_PREFIX = "env."
# A scaling series holds every spec field fixed but these; the seed only tells repeats apart.
_SCALED_FIELDS = frozenset({"gpus", "nodes", "seed"})
# Weak scaling grows the global batch with the GPUs.
_WEAK_SCALED_FIELDS = _SCALED_FIELDS | {"global_batch_size"}


class Member(Protocol):
    """A run as its series sees it: its row (named and given its point's figures here), its spec and series key,
    and what its point compares."""

    @property
    def row(self) -> CompareRow: ...
    @property
    def spec(self) -> RunSpec: ...
    @property
    def series_key(self) -> str: ...
    @property
    def time_s(self) -> float | None: ...
    @property
    def run_time_s(self) -> float | None: ...


def series_key(spec: RunSpec, mode: ScalingMode) -> str:
    """What the runs of one series share: the scaling mode and every spec field but the scaled ones."""
    return f"{mode}:" + spec.model_dump_json(
        exclude=set(_varying(spec, _WEAK_SCALED_FIELDS if mode == "weak" else _SCALED_FIELDS))
    )


def _varying(spec: RunSpec, scaled: frozenset[str]) -> frozenset[str]:
    """The fields that vary along a series: the scaled ones, and the learning rate where a rule (lr_scaling) derives
    it from the global batch (its reference_lr, kept, is the series' own)."""
    return scaled | {"lr"} if spec.lr_scaling is not LrScaling.none else scaled


def _mode(key: str) -> ScalingMode:
    return "weak" if key.startswith("weak:") else "strong"


def _scaled(key: str) -> frozenset[str]:
    return _WEAK_SCALED_FIELDS if _mode(key) == "weak" else _SCALED_FIELDS


def form_series(members: Sequence[Member]) -> None:
    """Name each run's series, and gather each series' runs into points."""
    specs: dict[str, RunSpec] = {}
    for member in members:
        specs.setdefault(member.series_key, member.spec)
    names = _series_names(specs)
    by_series: dict[str, list[Member]] = defaultdict(list)
    for member in members:
        member.row.series = names[member.series_key]
        by_series[member.series_key].append(member)
    for same in by_series.values():
        _add_points(same)
        target_series.score_rows([member.row for member in same])


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
    # An env value may be a secret, and a name is shown to everyone who sees the series: a series that differs by
    # one is named by the variable and which of its values it has, in the order first met.
    secret_values = {
        name: list(dict.fromkeys(json.dumps(dump[name]) for dump in dumps.values() if name in dump))
        for name in varying
        if name.startswith(_ENV_PREFIX)
    }

    def shown(name: str, value: Any) -> str:
        if name in secret_values:
            return f"{name}=value {secret_values[name].index(json.dumps(value)) + 1}"
        return f"{name}={json.dumps(value)}"

    names = {}
    for key, dump in dumps.items():
        parts = [dump["strategy"], *(shown(name, dump[name]) for name in varying if name in dump)]
        parts += ["weak scaling"] if weak_beside_strong and _mode(key) == "weak" else []
        names[key] = ", ".join(parts).replace('"', "")
    return names


def _described(spec: RunSpec, scaled: frozenset[str]) -> dict[str, Any]:
    """The fields that may tell a run's series from another's: a program's parts each by name, its env variables as
    env.NAME and its parameters as params.NAME, so that a series is named `ddp, params.lr=0.1` rather than by its
    whole program."""
    if spec.program is None:
        return spec.model_dump(mode="json", exclude=set(_varying(spec, scaled)))
    settings = {name: value for name, value in spec.settings().items() if name not in scaled | {"program"}}
    program = spec.program.model_dump(mode="json", exclude={"params", "env"})
    env = {_ENV_PREFIX + name: value for name, value in spec.program.env.items()}
    return {**settings, **program, **env, **{PARAM_PREFIX + name: value for name, value in spec.program.params.items()}}


def by_run_time(times: Sequence[tuple[float | None, float | None]]) -> bool:
    """Whether a series is measured by its runs' run time rather than their epoch (or step) time, given each run's
    (epoch time, run time): when some run has a run time but no epoch time (a program that prints no epoch), since
    one series compares one measure. A run that timed its epochs is measured by them, as the built-in worker's are."""
    return any(epoch_time is None and run_time is not None for epoch_time, run_time in times)


def _add_points(members: list[Member]) -> None:
    """Gather the series' runs into points by GPU count: mean and interval over repeats, speed-up and efficiency
    against the point with the fewest GPUs, and the point's flags on each of its runs. The series is measured by
    epoch (or step) time, or by run time where its runs did not all time epochs (by_run_time)."""
    run_timed = by_run_time([(item.time_s, item.run_time_s) for item in members])
    weak = members[0].row.scaling == "weak"
    measure: Measure = "run_time_s" if run_timed else "step_time_s" if weak else "epoch_time_s"
    times = {id(item): item.run_time_s if run_timed else item.time_s for item in members}
    by_gpus: dict[int, list[Member]] = defaultdict(list)
    for item in members:
        if times[id(item)]:
            by_gpus[item.row.gpus].append(item)
    if not by_gpus:
        return
    points = {
        gpus: statistics.point(gpus, [time for item in items if (time := times[id(item)])])
        for gpus, items in by_gpus.items()
    }
    baseline = points[min(points)]
    noisy = flags.check_noisy(list(points.values()))
    for gpus, items in by_gpus.items():
        point = points[gpus]
        ratio = gpus / baseline.gpus
        low, high = statistics.ratio_bounds(baseline, point)
        if weak:
            efficiency = baseline.mean / point.mean
            speedup, speedup_low, speedup_high = efficiency * ratio, _times(low, ratio), _times(high, ratio)
        else:
            speedup, speedup_low, speedup_high = baseline.mean / point.mean, low, high
            efficiency = speedup / ratio
        raised = (flags.check_superlinear(efficiency, gpus, baseline.gpus), noisy.get(gpus))
        point_flags = [flag for flag in raised if flag is not None]
        for item in items:
            item.row.speedup, item.row.efficiency = speedup, efficiency
            item.row.speedup_ci_low, item.row.speedup_ci_high = speedup_low, speedup_high
            item.row.point_mean_s, item.row.point_n = point.mean, point.n
            item.row.point_ci_low_s, item.row.point_ci_high_s = point.ci_low, point.ci_high
            item.row.baseline_gpus = baseline.gpus
            item.row.measure = measure
            item.row.flags = point_flags


def _times(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


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
    at_gpus: dict[int, list[CompareRow]] = defaultdict(list)
    for row in rows:
        at_gpus[row.gpus].append(row)
    points: dict[int, ScalingPoint] = {}
    for row in rows:
        if row.point_mean_s is None or row.gpus in points:
            continue
        runs = at_gpus[row.gpus]
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
            flags=flags.point_flags(row.flags),
            run_ids=[run.run_id for run in runs],
            medians=point_medians(runs),
        )
    ordered = [points[gpus] for gpus in sorted(points)]
    measured = [(point.gpus, point.speedup) for point in ordered if point.speedup is not None]
    fits = scaling_laws.fit([gpus for gpus, _ in measured], [speedup for _, speedup in measured])
    baseline = rows[0].baseline_gpus
    predicted = (
        scaling_laws.predict(fits, ordered[0].gpus, ordered[-1].gpus * 4) if ordered and not fits.refused else []
    )
    recommendation = (
        scaling_laws.recommendation(fits, ordered[0].gpus, ordered[-1].gpus) if ordered else nothing_timed(rows)
    )
    given, recommendation = _advice(recommendation, fits, ordered, at_gpus)
    measured_by = next((row.measure for row in rows if row.measure is not None), None)
    return ScalingSeries(
        series=name,
        strategy=rows[0].strategy,
        scaling=rows[0].scaling,
        measure=measured_by or ("step_time_s" if rows[0].scaling == "weak" else "epoch_time_s"),
        baseline_gpus=baseline,
        points=ordered,
        fits=_public_fits(fits, ordered),
        predicted=[PredictedPoint(gpus=p.gpus, law=p.law, speedup=p.speedup) for p in predicted],
        recommendation=recommendation,
        advice=given,
        batch=batch_words(rows),
        time_to_target=target_series.time_to_target(rows),
    )


def _advice(
    recommendation: str, fits: scaling_laws.Fits, ordered: Sequence[ScalingPoint], at_gpus: dict[int, list[CompareRow]]
) -> tuple[advice.Advice, str]:
    """The series' recommendation, given, hedged or withheld by the warnings on its points and their timed runs
    (without points, there is none to give: the recommendation says why). The time-to-target flags leave the
    throughput standing, and so its advice."""
    if not ordered:
        return "withheld", recommendation
    warned = [
        advice.warnings_of(
            point.gpus,
            [
                flag
                for row in at_gpus[point.gpus]
                if row.point_mean_s is not None
                for flag in row.flags
                if flag.code not in flags.TARGET_CODES
            ],
        )
        for point in ordered
    ]
    return advice.advise(recommendation, scaling_laws.advising_law(fits) is not None, ordered[0].gpus, warned)


def _public_fits(fits: scaling_laws.Fits, ordered: Sequence[ScalingPoint]) -> ScalingFits:
    amdahl, usl = fits.amdahl, fits.usl
    return ScalingFits(
        amdahl=AmdahlFitPublic(
            serial_fraction=amdahl.serial_fraction, r2=amdahl.r2, describes_points=amdahl.describes_points
        )
        if amdahl
        else None,
        usl=UslFitPublic(
            sigma=usl.sigma, kappa=usl.kappa, r2=usl.r2, peak_gpus=usl.peak_gpus, describes_points=usl.describes_points
        )
        if usl
        else None,
        refused=fits.refused,
        r2_bound=scaling_laws.R2_BOUND,
        summary=scaling_laws.summary(fits, ordered[0].gpus, ordered[-1].gpus) if ordered else "No law fitted yet.",
    )


def batch_words(rows: Sequence[CompareRow]) -> str:
    """What a series' runs train per step, as far as it is known: the same global batch (strong scaling), the same
    batch per GPU (the global batch grows), or that a program did not declare its batch."""
    batches = {(row.gpus, row.global_batch_size) for row in rows}
    if not batches or any(batch is None for _, batch in batches):
        return (
            "the program does not declare its batch (program.batch), so whether every run trains the same global "
            "batch is not known"
        )
    known = sorted((gpus, batch) for gpus, batch in batches if batch is not None)
    sizes = sorted({batch for _, batch in known})
    if len(sizes) == 1:
        return f"every run trains the same global batch of {sizes[0]}"
    per_gpu = {batch / gpus for gpus, batch in known}
    if len(per_gpu) == 1:
        return (
            f"the batch per GPU stays {round(per_gpu.pop())} and the global batch grows with the GPUs "
            f"({sizes[0]} to {sizes[-1]})"
        )
    return f"the global batch differs between the runs ({', '.join(map(str, sizes))})"


def nothing_timed(rows: Sequence[CompareRow]) -> str:
    """Why a series has no point: runs still under way (or being read), or, once all have ended, why none of them
    gave a time."""
    if any(not row.ingest_done for row in rows):
        return "No timed runs yet: nothing to fit."
    if not any(row.state is RunState.completed for row in rows):
        states = ", ".join(sorted({row.state.value for row in rows}))
        return f"No run of this series completed ({states}): nothing to time or fit; see each run's message."
    return (
        "No run of this series printed an epoch line, and none has a run time (runs from before scalelab timed "
        "launches, imported logs, or launches killed with their jobs): nothing to time or fit."
    )


# The accounting's figures that a point gives the median of: those the dashboard charts against GPUs.
_RESOURCE_FIGURES = ("device_hours_per_epoch", "energy_per_sample_j")


def point_medians(rows: Sequence[CompareRow]) -> PointMedians:
    """The medians over a point's runs of the figures the comparison gives per run, each over the runs that have it:
    the time breakdown by part, the accounting's figures where the cluster gathers them, the last epoch's standard
    figures and each of the programs' own metrics."""
    breakdowns = [row.time_breakdown for row in rows if row.time_breakdown is not None]
    parts = {part: statistics.median(breakdown.get(part) for breakdown in breakdowns) for part in TIME_PARTS}
    accounted = [row.resources for row in rows if row.resources is not None]
    resources = {
        figure: statistics.median(getattr(it, figure) for it in accounted if gathered(it, figure))
        for figure in _RESOURCE_FIGURES
    }
    names = sorted({name for row in rows for name in row.metrics})
    metrics = {name: statistics.median(row.metrics.get(name) for row in rows) for name in names}
    return PointMedians(
        time_breakdown={part: value for part, value in parts.items() if value is not None},
        time_breakdown_n=len(breakdowns),
        device_hours_per_epoch=resources["device_hours_per_epoch"],
        energy_per_sample_j=resources["energy_per_sample_j"],
        final_train_loss=statistics.median(row.final_train_loss for row in rows),
        final_val_loss=statistics.median(row.final_val_loss for row in rows),
        final_val_accuracy=statistics.median(row.final_val_accuracy for row in rows),
        mean_epoch_time_s=statistics.median(row.mean_epoch_time_s for row in rows),
        samples_per_s=statistics.median(row.samples_per_s for row in rows),
        metrics={name: value for name, value in metrics.items() if value is not None},
    )


def gathered(resources: RunResources, figure: str) -> bool:
    """Whether the run's cluster gathers this accounting figure: `not_gathered` names it, bare of its unit or not,
    and energy per sample needs the energy."""

    def missing(name: str) -> bool:
        return name in resources.not_gathered or re.sub(r"_(s|j|bytes)$", "", name) in resources.not_gathered

    return not missing(figure) and not (figure == "energy_per_sample_j" and missing("energy_j"))
