"""The command about an experiment's report: one HTML file to keep, hand in or attach to a paper."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from client.api import Client
from client.command import EXIT_OK, Command, UsageError


def default_file(experiment: str) -> str:
    """The name the server gives the file, so that a browser's download and the command agree."""
    return f"scalelab-{experiment}-report.html"


def report(client: Client, args: argparse.Namespace) -> int:
    # Asked for before the file is opened: a 404 or a refused token leaves no empty file behind.
    html = client.report_html(args.experiment)
    target = args.output or default_file(args.experiment)
    if target == "-":
        sys.stdout.write(html)
        return EXIT_OK
    path = Path(target)
    try:
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    print(f"wrote {path} ({len(html.encode()) / 1024:.0f} kB): open it in a browser, no network needed")
    return EXIT_OK


def _report_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("experiment", metavar="EXPERIMENT")
    sub.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write the report; - writes it to standard output (default: scalelab-EXPERIMENT-report.html)",
    )


COMMANDS = (
    Command(
        "report",
        report,
        "Save an experiment's report as one HTML file",
        "The request, the flags, the scaling charts with their fitted laws and recommendation, the table of runs, "
        "resources, provenance (image digest, versions, nodes) and a batch script, in one file that opens in any "
        "browser without the server or a network.",
        _report_arguments,
        ("scalelab report 0a1b2c3d4e -o study.html", "scalelab report 0a1b2c3d4e -o - | gzip > study.html.gz"),
    ),
)
