"""`scalelab reference` and `scalelab regression`: pin an experiment as its spec's reference (or mark it an A/A run),
and test a later experiment against it point by point."""

from __future__ import annotations

import argparse
import json

from client.api import Client
from client.command import EXIT_FAILED, EXIT_OK, Command
from client.schemas import RegressionPointView


def _ratio(point: RegressionPointView) -> str:
    if point.ratio is None:
        return "no ratio (a side has no finished run)"
    interval = (
        f" [{point.ci_low:.3f}, {point.ci_high:.3f}]"
        if point.ci_low is not None and point.ci_high is not None
        else " (no interval: fewer than 2 runs a side)"
    )
    return f"{point.ratio:.3f}x{interval}"


def _point_line(point: RegressionPointView) -> str:
    counts = f"n {point.reference_n}/{point.later_n}"
    line = f"  {point.series} at {point.gpus} GPUs: {point.verdict}, {_ratio(point)} ({counts})"
    return line + (f"\n    hedged: {point.hedge}" if point.hedge else "")


def reference(client: Client, args: argparse.Namespace) -> int:
    if args.action == "unpin":
        client.unpin(args.experiment)
        print(f"{args.experiment}: no longer pinned")
        return EXIT_OK
    if args.action == "history":
        history = client.reference_history(args.experiment)
        floor = history.floor
        noise = f"noise floor {floor.floor:.1%} ({floor.source})"
        print(f"reference {history.reference.experiment_id} on {floor.profile}: {noise}")
        for entry in history.entries:
            image = entry.image_digest or entry.image or "image not reported"
            print(f"{entry.created_at:%Y-%m-%d %H:%M} {entry.experiment_id} {entry.role}: {entry.verdict}; {image}")
            for point in entry.points:
                print(_point_line(point))
        return EXIT_OK
    pinned = client.pin(args.experiment, "aa" if args.action == "aa" else "reference")
    if pinned.role == "aa":
        print(
            f"{pinned.experiment_id}: an A/A run of {pinned.pair_of} on {pinned.profile}; it sets the noise floor there"
        )
    else:
        print(f"{pinned.experiment_id}: the reference of its spec ({pinned.spec_key[:12]}) on {pinned.profile}")
    return EXIT_OK


def regression(client: Client, args: argparse.Namespace) -> int:
    answer = client.regression(args.experiment, args.against)
    if args.json:
        print(json.dumps(answer.model_dump(mode="json"), indent=2))
    else:
        print(answer.summary)
        for point in answer.points:
            print(_point_line(point))
        for alone in answer.unmatched:
            print(f"  {alone}: on one side only")
    return EXIT_FAILED if args.fail_on_regression and answer.verdict == "regressed" else EXIT_OK


def _reference_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "action",
        choices=("pin", "aa", "unpin", "history"),
        help="pin: the reference of its spec; aa: an A/A run of that reference (measures the noise floor); "
        "unpin: take either mark off; history: every experiment of a pinned reference's spec against it",
    )
    sub.add_argument("experiment", metavar="EXPERIMENT")


def _regression_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("experiment", metavar="EXPERIMENT")
    sub.add_argument("--against", metavar="EXPERIMENT", help="compare with this experiment, not the pinned reference")
    sub.add_argument("--json", action="store_true", help="the API's answer as JSON")
    sub.add_argument(
        "--fail-on-regression",
        action="store_true",
        help=f"exit {EXIT_FAILED} when the verdict is regressed (for a canary study in a cron job or CI)",
    )


COMMANDS = (
    Command(
        "reference",
        reference,
        "Pin an experiment as the reference of its spec, mark an A/A run, or show a reference's history",
        "Its spec is what its timing depends on: its runs' specs but the seed, its scaling, isolation, partition, "
        "sbatch options and profile; not its name or repeats. Later experiments of that spec are compared with it "
        "(scalelab regression). An A/A run is the same spec run again: its ratios to the reference set the profile's "
        "noise floor (22 % until there is one). Only an experiment's owner or an admin may pin or mark it.",
        _reference_arguments,
        (
            "scalelab reference pin 0a1b2c3d4e",
            "scalelab reference aa 5f6a7b8c9d",
            "scalelab reference history 0a1b2c3d4e",
        ),
    ),
    Command(
        "regression",
        regression,
        "Test an experiment against the pinned reference of its spec: regressed, improved or indistinguishable",
        "Per point (series and GPU count), the ratio of its mean time to the reference's with a 95 % bootstrap "
        "interval (2000 resamples, seeded); regressed when the whole interval lies above 1 + the profile's noise "
        "floor, improved when below 1 / (1 + floor). A reference point carrying warnings hedges the verdict.",
        _regression_arguments,
        (
            "scalelab regression 5f6a7b8c9d",
            "scalelab regression 5f6a7b8c9d --against 0a1b2c3d4e",
            "scalelab regression 5f6a7b8c9d --fail-on-regression",
        ),
    ),
)
