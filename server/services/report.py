"""An experiment's report: one self-contained HTML file with the request, the figures and what is needed to judge
them (flags, fits, resources, provenance, a batch script) — what a student hands in or a researcher attaches to a
paper.

The charts are inline SVG drawn here, not plotly: plotly.js would add 4.8 MB to every report (and carries
https:// addresses of map tiles and fonts in its code), while the SVG of a sweep is a few kilobytes, needs no
script to show, and prints to PDF as drawn. The file fetches nothing: it is opened from disk, often offline.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlmodel import Session, col, select

from contract.records import CodeRecord
from server import __version__
from server.errors import NotFound
from server.models import (
    CompareRow,
    Experiment,
    Flag,
    Metric,
    RegressionPublic,
    Run,
    ScalingPublic,
    ScalingSeries,
    TimeToTarget,
    User,
)
from server.services import code, comparison, experiments, references, rundirs, secrets
from server.services.programs import is_program
from server.services.runs import runs_of_experiment

TEMPLATES = Path(__file__).resolve().parents[2] / "frontend" / "templates"
# Autoescape everything: the name, the request and the batch script are typed by users.
_env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True))

# The dashboard's colours (frontend/static/js/charts.js), so that a series looks alike on the page and in print.
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999")
LAW_DASH = {"amdahl": "7 4", "usl": "2 3"}
FLAG_COLOUR = "#C00000"
IDEAL_COLOUR = "#999999"

# The drawing area of every chart, in SVG units (the SVG scales to the page's width).
WIDTH, HEIGHT = 640, 340
# What a cell shows for a figure that is not known.
MISSING = "\N{EN DASH}"
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 14, 46


def fmt(value: float | None, digits: int = 4) -> str:
    """A figure for people: four significant digits, thousands grouped rather than in exponent notation."""
    if value is None or not math.isfinite(value):
        return MISSING
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def fmt_bytes(value: int | None) -> str:
    if value is None:
        return MISSING
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value} B"


def fmt_percent(value: float | None) -> str:
    return MISSING if value is None else f"{value * 100:.3g} %"


_env.filters.update(fmt=fmt, fmt_bytes=fmt_bytes, fmt_percent=fmt_percent)


# ---- charts ------------------------------------------------------------------------------------------------------


@dataclass
class Mark:
    """A measured point, already in SVG units, with its interval's ends and what its tooltip says."""

    x: float
    y: float
    low: float | None
    high: float | None
    flagged: bool
    tip: str


@dataclass
class Trace:
    name: str
    colour: str
    path: str
    dash: str | None = None
    marks: list[Mark] = field(default_factory=list)


@dataclass
class Chart:
    id: str
    title: str
    x_label: str
    y_label: str
    description: str
    traces: list[Trace]
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM

    @property
    def has_flags(self) -> bool:
        return any(mark.flagged for trace in self.traces for mark in trace.marks)


# (GPUs, value, interval low, interval high, flag messages), in data units.
Point = tuple[float, float, float | None, float | None, list[str]]


@dataclass
class _Line:
    """A trace before it is placed on the chart."""

    name: str
    colour: str
    points: list[Point]
    dash: str | None = None
    marked: bool = True


def _nice_step(span: float) -> float:
    """A tick step of 1, 2 or 5 times a power of ten that cuts `span` into about five."""
    raw = span / 5
    power = 10.0 ** math.floor(math.log10(raw))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= raw)


def _place(chart_id: str, title: str, y_label: str, description: str, lines: list[_Line]) -> Chart | None:
    """Lines on a log2 GPU axis (counts double along a sweep) and a linear axis from 0; None with nothing to draw."""
    points = [point for line in lines for point in line.points]
    if not points:
        return None
    gpus = sorted({point[0] for point in points})
    top_value = max(max(point[1], point[3] or 0) for point in points)
    step = _nice_step(top_value * 1.05 or 1)
    y_max = step * math.ceil(top_value * 1.05 / step) or step
    # Half a doubling of room either side, so that the first and last points do not sit on the frame.
    low, high = math.log2(gpus[0]) - 0.5, math.log2(gpus[-1]) + 0.5
    chart = Chart(chart_id, title, "GPUs (log scale)", y_label, description, [], [], [])

    def x_of(value: float) -> float:
        return chart.left + (math.log2(value) - low) / (high - low) * (chart.right - chart.left)

    def y_of(value: float) -> float:
        return chart.bottom - value / y_max * (chart.bottom - chart.top)

    # Every measured count is labelled, but a long sweep keeps its powers of two only, so labels do not overlap.
    shown = gpus if len(gpus) <= 10 else [g for g in gpus if math.log2(g).is_integer()]
    chart.x_ticks = [(x_of(g), fmt(g)) for g in shown]
    chart.y_ticks = [(y_of(i * step), fmt(i * step)) for i in range(round(y_max / step) + 1)]
    for line in lines:
        ordered = sorted(line.points, key=lambda point: point[0])
        path = " ".join(f"{'M' if i == 0 else 'L'}{x_of(g):.1f},{y_of(v):.1f}" for i, (g, v, *_) in enumerate(ordered))
        trace = Trace(line.name, line.colour, path, line.dash)
        if line.marked:
            for g, value, ci_low, ci_high, flags in ordered:
                interval = f" (95 % CI {fmt(ci_low)} to {fmt(ci_high)})" if ci_low is not None else ""
                tip = f"{line.name}, {fmt(g)} GPUs: {fmt(value)}{interval}" + "".join(f"\n⚑ {m}" for m in flags)
                trace.marks.append(
                    Mark(
                        x_of(g),
                        y_of(value),
                        None if ci_low is None else y_of(ci_low),
                        None if ci_high is None else y_of(ci_high),
                        bool(flags),
                        tip,
                    )
                )
        chart.traces.append(trace)
    return chart


# The time a series' points compare, as the server names it: the chart's label and the words in the series' heading.
_TIME_LABELS = {"step_time_s": "time per step (s)", "run_time_s": "run time, start-up included (s)"}
MEASURE_WORDS = {
    "epoch_time_s": "epoch time",
    "step_time_s": "step time",
    "run_time_s": "run time (its runs printed no epoch: the wall time of their launches, start-up included)",
}


def _time_label(measure: str) -> str:
    return _TIME_LABELS.get(measure, "time per epoch (s)")


def _messages(flags: list[Flag]) -> list[str]:
    return [flag.message for flag in flags]


def _time_lines(scaling: ScalingPublic, measure: str, colour: dict[str, str]) -> list[_Line]:
    return [
        _Line(s.series, colour[s.series], [(p.gpus, p.mean, p.ci_low, p.ci_high, _messages(p.flags)) for p in s.points])
        for s in scaling.series
        if s.measure == measure
    ]


def _speedup_lines(series: ScalingSeries, colour: str) -> list[_Line]:
    """The measured speed-ups, each fitted law's curve, and the ideal from the baseline to the farthest point."""
    measured: list[Point] = [
        (p.gpus, p.speedup, p.speedup_ci_low, p.speedup_ci_high, _messages(p.flags))
        for p in series.points
        if p.speedup is not None
    ]
    if not measured:
        return []
    lines = [_Line(series.series, colour, measured)]
    for law, dash in LAW_DASH.items():
        curve: list[Point] = [(p.gpus, p.speedup, None, None, []) for p in series.predicted if p.law == law]
        if curve and _describes(series, law):
            lines.append(_Line(f"{series.series}: {law} fit", colour, curve, dash, marked=False))
    baseline = series.baseline_gpus or min(p.gpus for p in series.points)
    reach = max(point[0] for line in lines for point in line.points)
    ideal: list[Point] = [(g, g / baseline, None, None, []) for g in _doublings(baseline, reach)]
    lines.append(_Line(f"{series.series}: ideal", IDEAL_COLOUR, ideal, "1 5", marked=False))
    return lines


def _describes(series: ScalingSeries, law: str) -> bool:
    """Whether the series' fit of this law describes its points: one that does not is left out of the chart."""
    fitted = series.fits.amdahl if law == "amdahl" else series.fits.usl
    return fitted is not None and fitted.describes_points


def _efficiency_line(series: ScalingSeries, colour: str) -> _Line:
    points: list[Point] = [
        (p.gpus, p.efficiency, None, None, _messages(p.flags)) for p in series.points if p.efficiency is not None
    ]
    return _Line(series.series, colour, points)


def charts(scaling: ScalingPublic) -> list[Chart]:
    """Time against GPUs with intervals (one chart per measure), speed-up with the ideal and the fitted laws, and
    efficiency; flagged points ringed."""
    colour = {series.series: COLOURS[i % len(COLOURS)] for i, series in enumerate(scaling.series)}
    found: list[Chart | None] = []
    for measure in dict.fromkeys(series.measure for series in scaling.series):
        label = _time_label(measure)
        found.append(
            _place(
                f"time-{measure}",
                f"{label[0].upper()}{label[1:]} against GPUs",
                label,
                "Mean over repeats; bars: 95 % confidence interval (Student's t), where there are repeats.",
                _time_lines(scaling, measure, colour),
            )
        )
    found.append(
        _place(
            "speedup",
            "Speed-up against GPUs",
            "speed-up",
            "Against each series' smallest GPU count; bars: 95 % interval. Dotted grey: ideal linear speed-up; "
            "dashed: the fitted laws (long dashes Amdahl, short dashes USL), where they describe the points.",
            [line for s in scaling.series for line in _speedup_lines(s, colour[s.series])],
        )
    )
    found.append(
        _place(
            "efficiency",
            "Parallel efficiency against GPUs",
            "efficiency",
            "Strong scaling: speed-up over the ratio of GPUs; weak scaling: the baseline's time per step over this "
            "one's. 1 is ideal; above 1 is flagged.",
            [_efficiency_line(s, colour[s.series]) for s in scaling.series],
        )
    )
    return [chart for chart in found if chart is not None]


def regression_charts(regression: RegressionPublic) -> list[Chart]:
    """The two sides' mean times per series against GPUs, drawn together: the reference dashed, this one solid and
    ringed where its verdict is a flag."""
    names = list(dict.fromkeys(point.series for point in regression.points))
    lines: list[_Line] = []
    for i, name in enumerate(names):
        points = [point for point in regression.points if point.series == name]
        reference: list[Point] = [
            (p.gpus, p.reference_mean_s, None, None, []) for p in points if p.reference_mean_s is not None
        ]
        later: list[Point] = [
            (p.gpus, p.later_mean_s, None, None, _messages(p.flags)) for p in points if p.later_mean_s is not None
        ]
        colour = COLOURS[i % len(COLOURS)]
        lines.append(_Line(f"{name}: reference {regression.reference_id}", colour, reference, dash="6 4"))
        lines.append(_Line(f"{name}: this experiment", colour, later))
    chart = _place(
        "regression",
        "Against the reference: time against GPUs",
        "mean time (s)",
        "Dashed: the reference; solid: this experiment; ringed: a point regressed or improved beyond the noise floor.",
        lines,
    )
    return [] if chart is None else [chart]


def _doublings(start: float, reach: float) -> list[float]:
    """Points along the ideal line: it curves on a log axis, so it needs more than its two ends."""
    points, value = [], float(start)
    while value < reach:
        points.append(value)
        value *= 2**0.25
    return [*points, float(reach)]


# ---- time to target ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetCells:
    """A point scored by time to target, as its row of the report's table shows it."""

    gpus: int
    batch: str
    runs: str  # reached of runs, and those that did not or have not yet
    score: str  # seconds, with its interval or how it was scored
    epochs: str
    effective: str
    throughput: str
    statistical: str
    flags: list[Flag]


def _ranged(value: float | None, low: float | None, high: float | None, digits: int = 3) -> str:
    if value is None:
        return MISSING
    return f"{fmt(value, digits)} [{fmt(low, digits)}, {fmt(high, digits)}]" if low is not None else fmt(value, digits)


def target_table(ttt: TimeToTarget) -> list[TargetCells]:
    """The rows of a series' time-to-target table: GPUs, global batch, runs reached and not, the score with its
    interval, epochs to target, effective speed-up beside throughput speed-up, statistical efficiency, flags."""
    cells = []
    for point in ttt.points:
        runs = f"{point.reached} of {point.runs} reached"
        runs += f", {point.not_reached} did not" if point.not_reached else ""
        runs += f", {point.unfinished} still going" if point.unfinished else ""
        score = _ranged(point.time_to_target_s, point.ci_low_s, point.ci_high_s)
        if point.scoring == "olympic":
            score += f" (olympic, n {point.n})"
        elif point.scoring == "mean":
            score += f" (mean, n {point.n})"
        cells.append(
            TargetCells(
                gpus=point.gpus,
                batch=MISSING if point.global_batch_size is None else str(point.global_batch_size),
                runs=runs,
                score=score,
                epochs=_ranged(point.epochs_to_target, point.epochs_ci_low, point.epochs_ci_high),
                effective=_ranged(
                    point.effective_speedup, point.effective_speedup_ci_low, point.effective_speedup_ci_high
                ),
                throughput=fmt(point.throughput_speedup, 3),
                statistical=fmt(point.statistical_efficiency, 3),
                flags=point.flags,
            )
        )
    return cells


# ---- the report --------------------------------------------------------------------------------------------------


@dataclass
class Provenance:
    run_id: str
    job: str
    nodes: str
    host: str
    image: str
    image_digest: str
    worker_version: str
    torch_version: str
    source_revision: str
    code: str = MISSING  # a program's: which code it started (services/code.py)


def _provenance(runs: list[Run], hosts: dict[str, str], codes: dict[str, CodeRecord] | None = None) -> list[Provenance]:
    codes = codes or {}
    return [
        Provenance(
            run.id,
            f"{run.scheduler} {run.job_id}" if run.job_id else run.scheduler,
            str(run.spec.get("nodes", MISSING)),
            hosts.get(run.id, MISSING),
            run.image or MISSING,
            run.image_digest or MISSING,
            run.worker_version or MISSING,
            run.torch_version or MISSING,
            run.source_revision or MISSING,
            code.summary(codes.get(run.id)) if is_program(run) else MISSING,
        )
        for run in runs
    ]


def _differing(provenance: list[Provenance]) -> list[str]:
    """What is not the same for every run: figures of different images or versions may not compare."""
    names = ("image_digest", "worker_version", "torch_version", "source_revision", "code")
    return [name.replace("_", " ") for name in names if len({getattr(p, name) for p in provenance}) > 1]


def _series_rows(series: ScalingSeries, rows: list[CompareRow]) -> list[CompareRow]:
    return [row for row in rows if row.series == series.series]


def render_report(
    experiment: Experiment,
    rows: list[CompareRow],
    scaling: ScalingPublic,
    script: str | None,
    runs: list[Run],
    *,
    request: dict[str, Any] | None = None,
    hosts: dict[str, str] | None = None,
    generated_at: datetime | None = None,
    codes: dict[str, CodeRecord] | None = None,
    regression: RegressionPublic | None = None,
) -> str:
    """The report as one HTML document that needs nothing else: styles and charts inline, no script, no address.

    `request`: the experiment's request as the reader may see it (the stored one if not given); `hosts`: run id ->
    the host its first rank started on, where the worker said; `regression`: the experiment against a reference.
    """
    provenance = _provenance(runs, hosts or {}, codes)
    return _env.get_template("report.html").render(
        experiment=experiment,
        request_json=json.dumps(experiment.request if request is None else request, indent=2, ensure_ascii=False),
        rows=rows,
        scaling=scaling,
        charts=charts(scaling),
        script=script,
        script_run=runs[0].id if runs else None,
        provenance=provenance,
        differing=_differing(provenance),
        # A program's code is whatever its workdir holds when it starts: submitting the request again need not
        # repeat the experiment.
        programs=any(is_program(run) for run in runs),
        any_resources=any(row.resources is not None for row in rows),
        series_rows=_series_rows,
        generated_at=(generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC"),
        version=__version__,
        flag_colour=FLAG_COLOUR,
        measure_words=MEASURE_WORDS,
        target_table=target_table,
        regression=regression,
        regression_charts=regression_charts(regression) if regression else [],
        fmt=fmt,
    )


def _hosts(session: Session, run_ids: list[str]) -> dict[str, str]:
    """The host each run's latest start record names, in one query for the whole experiment."""
    query = (
        select(Metric.run_id, Metric.record)
        .where(col(Metric.run_id).in_(run_ids), Metric.kind == "start")
        .order_by(col(Metric.offset))
    )
    return {run_id: str(record["hostname"]) for run_id, record in session.exec(query) if record.get("hostname")}


def _regression(session: Session, experiment_id: str, viewer: User, against: str | None) -> RegressionPublic | None:
    """The experiment against `against`, or against the reference pinned for its spec; None where none is pinned or
    the experiment is that reference."""
    try:
        found = references.regression_of(session, viewer, experiment_id, against)
    except NotFound:
        if against is not None:
            raise
        return None
    return None if found.reference_id == experiment_id and against is None else found


def experiment_report(session: Session, experiment_id: str, viewer: User, against: str | None = None) -> str:
    """The report of one experiment as it stands now (runs still going show what they have so far), as the viewer
    may see it: a program's env values hidden unless the viewer may change the experiment. Where a reference is
    pinned for its spec (or `against` names another experiment), the two are compared point by point."""
    experiment = experiments.get_experiment(session, experiment_id)
    rows = comparison.compare_rows(session, experiment_ids=[experiment.id])
    runs = runs_of_experiment(session, experiment.id)
    script = rundirs.read_script(Path(runs[0].run_dir), rundirs.file_owner(runs[0])) if runs else None
    if runs:
        script = secrets.script_for(viewer, runs[0].owner, script, runs[0].spec)
    return render_report(
        experiment,
        rows,
        comparison.scaling(rows, experiment.id),
        script,
        runs,
        request=secrets.request_for(viewer, experiment.owner, experiment.request),
        hosts=_hosts(session, [run.id for run in runs]),
        codes=code.code_records(session, [run.id for run in runs]),
        regression=_regression(session, experiment.id, viewer, against),
    )
