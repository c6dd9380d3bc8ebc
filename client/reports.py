"""The commands about an experiment's results: its scaling analysis in the terminal, and its report, one HTML file
to keep, hand in or attach to a paper."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from client.api import Client
from client.command import EXIT_OK, Command, UsageError
from client.output import print_json, print_table, wrapped
from client.schemas import ScalingPointView, TargetPointView, TimeToTargetView


def default_file(experiment: str) -> str:
    """The name the server gives the file, so that a browser's download and the command agree."""
    return f"scalelab-{experiment}-report.html"


def save_report(client: Client, experiment: str, path: Path, against: str | None = None) -> int:
    """Write the experiment's report to `path`; its size in bytes. The command and the Python API both save it so."""
    # Asked for before the file is opened: a 404 or a refused token leaves no empty file behind.
    html = client.report_html(experiment, against)
    try:
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    return len(html.encode())


def report(client: Client, args: argparse.Namespace) -> int:
    target = args.output or default_file(args.experiment)
    if target == "-":
        sys.stdout.write(client.report_html(args.experiment, args.against))
        return EXIT_OK
    path = Path(target)
    size = save_report(client, args.experiment, path, args.against)
    print(f"wrote {path} ({size / 1024:.0f} kB): open it in a browser, no network needed")
    return EXIT_OK


# The time a series' points compare, as the server names it: the table's column and the words in its heading.
_MEASURES = {
    "epoch_time_s": ("S/EPOCH", "epoch time"),
    "step_time_s": ("S/STEP", "step time"),
    "run_time_s": ("S/RUN", "run time: the wall time of each run's launches, start-up included"),
}


def scaling(client: Client, args: argparse.Namespace) -> int:
    if args.json:
        print_json(client.scaling_json(args.experiment))
        return EXIT_OK
    analysis = client.scaling(args.experiment)
    for flag in analysis.flags:
        print(wrapped(f"{flag.severity.upper()} {flag.code}: {flag.message}", "  "))
    if analysis.flags:
        print()
    for series in analysis.series:
        unit, measured_by = _MEASURES.get(series.measure, ("S", series.measure))
        batch = f"; {series.batch}" if series.batch else ""
        print(f"{series.series} ({series.scaling} scaling, measured by {measured_by}{batch})")
        rows = [_point_row(point) for point in series.points]
        print_table(["GPUS", unit, "95 % CI", "N", "SPEED-UP", "EFFICIENCY", "FLAGS"], rows)
        if series.fits.summary:
            print(wrapped(series.fits.summary, ""))
        # A recommendation the server hedged or withheld says so first, as the dashboard marks it.
        print(wrapped(("" if series.advice == "given" else f"{series.advice.upper()}: ") + series.recommendation, ""))
        if series.time_to_target is not None:
            _time_to_target(series.time_to_target)
        print()
    return EXIT_OK


def _time_to_target(ttt: TimeToTargetView) -> None:
    """The series scored by time to its target: a row per point and the server's answer in words."""
    print(f"time to {ttt.target.describe()}")
    headers = ["GPUS", "BATCH", "REACHED", "S TO TARGET", "95 % CI", "N", "EPOCHS", "EFFECTIVE", "THROUGHPUT"]
    print_table([*headers, "STAT. EFF.", "FLAGS"], [_target_row(point) for point in ttt.points])
    print(wrapped(ttt.summary, ""))


def _figure(value: float | None, digits: str = ".3g") -> str:
    return "" if value is None else format(value, digits)


def _target_row(point: TargetPointView) -> list[object]:
    reached = f"{point.reached}/{point.runs}" + (f" ({point.unfinished} going)" if point.unfinished else "")
    if point.scoring == "olympic":
        interval = "olympic"
    elif point.ci_low_s is not None and point.ci_high_s is not None:
        interval = f"{point.ci_low_s:.3g}-{point.ci_high_s:.3g}"
    else:
        interval = ""
    return [
        point.gpus,
        "" if point.global_batch_size is None else point.global_batch_size,
        reached,
        _figure(point.time_to_target_s),
        interval,
        point.n,
        _figure(point.epochs_to_target),
        _figure(point.effective_speedup, ".2f"),
        _figure(point.throughput_speedup, ".2f"),
        _figure(point.statistical_efficiency, ".2f"),
        " ".join(flag.code for flag in point.flags),
    ]


def _point_row(point: ScalingPointView) -> list[object]:
    interval = f"{point.ci_low:.3g}-{point.ci_high:.3g}" if point.ci_low is not None and point.ci_high else ""
    return [
        point.gpus,
        f"{point.mean:.3g}",
        interval,
        point.n,
        "" if point.speedup is None else f"{point.speedup:.2f}",
        "" if point.efficiency is None else f"{point.efficiency:.2f}",
        " ".join(flag.code for flag in point.flags),
    ]


def _scaling_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("experiment", metavar="EXPERIMENT")
    sub.add_argument("--json", action="store_true", help="the API's answer as it came, fits and curves included")


def _report_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("experiment", metavar="EXPERIMENT")
    sub.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write the report; - writes it to standard output (default: scalelab-EXPERIMENT-report.html)",
    )
    sub.add_argument(
        "--against",
        metavar="EXPERIMENT",
        help="compare with this experiment point by point (default: the reference pinned for its spec, if any)",
    )


COMMANDS = (
    Command(
        "scaling",
        scaling,
        "Show an experiment's scaling: points with intervals, flags, fitted laws",
        "Per series: each GPU count's mean time over its repeats with a 95 % interval and n, speed-up and "
        "efficiency against the smallest count, the flags that say which figures not to trust and why, and a "
        "sentence on how far it scales from Amdahl's law and the Universal Scalability Law fitted to it.",
        _scaling_arguments,
        ("scalelab scaling 0a1b2c3d4e", "scalelab scaling 0a1b2c3d4e --json | jq '.series[].fits'"),
    ),
    Command(
        "report",
        report,
        "Save an experiment's report as one HTML file",
        "The request, the flags, the scaling charts with their fitted laws and recommendation, the table of runs, "
        "resources, provenance (image digest, versions, nodes) and a batch script, in one file that opens in any "
        "browser without the server or a network. Where a reference is pinned for its spec (or --against names "
        "another experiment), each point's ratio of times with its interval and verdict, and the two drawn together.",
        _report_arguments,
        ("scalelab report 0a1b2c3d4e -o study.html", "scalelab report 0a1b2c3d4e -o - | gzip > study.html.gz"),
    ),
)
