"""The command that plans an experiment before it runs: its probes and 1-process runs, then every grid point
predicted, the recommendation for a goal and the GPU-hours (POST/GET /api/plans)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from client.api import Client
from client.command import EXIT_FAILED, EXIT_OK, Command, UsageError, positive
from client.inputs import read_experiment
from client.output import print_table, wrapped
from client.schemas import PlanView

GOALS = ("fastest_epoch", "largest_n_at_efficiency")


def _figure(value: float | None, form: str = ".3g") -> str:
    return "-" if value is None else format(value, form)


def _print_plan(plan: PlanView) -> None:
    print(f'plan {plan.id} "{plan.name}": {plan.state}')
    if plan.state == "running":
        print(wrapped(f"waiting for {len(plan.waiting_for)} run(s): {' '.join(plan.waiting_for)}", "  "))
        return
    if plan.failed:
        print(wrapped(f"runs that did not complete: {' '.join(plan.failed)}", "  "))
    headers = ["STRATEGY", "GPUS", "NODES", "STEP S", "EPOCH S", "SPEED-UP", "EFFICIENCY", "MEMORY/GPU GIB",
               "GPU-HOURS", "WHY NONE"]  # fmt: skip
    rows = [
        [
            point.strategy, point.gpus, point.nodes, _figure(point.step_time_s), _figure(point.epoch_time_s),
            _figure(point.speedup, ".2f"), _figure(point.efficiency, ".2f"),
            f"{point.memory_per_gpu_bytes / 2**30:.3g}", _figure(point.gpu_hours), point.unavailable or "",
        ]
        for point in plan.points
    ]  # fmt: skip
    print_table(headers, rows, flexible=len(headers) - 1)
    lower = "" if plan.gpu_hours_complete else " (at least: some points have no prediction)"
    print(f"the whole grid: {_figure(plan.grid_gpu_hours)} GPU-hours{lower}")
    if plan.recommendation is None:
        print(wrapped(f"no point meets the goal {plan.goal}: nothing recommended", "  "))
        return
    chosen = plan.recommendation
    print(wrapped(f"recommended ({plan.goal}): {chosen.why}", "  "))
    print(f"the recommended point: {_figure(plan.recommended_gpu_hours)} GPU-hours")


def plan(client: Client, args: argparse.Namespace) -> int:
    if (args.file is None) == (args.show is None):
        raise UsageError("give an experiment file to plan, or --show PLAN_ID for one planned before")
    if args.show is not None:
        answer = client.plan(args.show)
    else:
        options = {"goal": args.goal, "efficiency": args.efficiency, "probe_seconds": args.probe_seconds}
        answer = client.create_plan(read_experiment(args.file), options)
    while args.wait and answer.state == "running":
        time.sleep(args.interval)
        answer = client.plan(answer.id)
    _print_plan(answer)
    if args.run and answer.state != "running":
        created = client.plan_experiment(answer.id)
        print(f"submitted experiment {created.id} of the recommended point: {len(created.runs)} run(s)")
    return EXIT_FAILED if answer.state == "failed" else EXIT_OK


def _arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("file", type=Path, nargs="?", help="the experiment request (JSON or YAML), as submit takes it")
    sub.add_argument("--show", metavar="PLAN_ID", help="show a plan made before, instead of making one")
    sub.add_argument("--goal", choices=GOALS, default="fastest_epoch", help="what to recommend (default: %(default)s)")
    sub.add_argument(
        "--efficiency", type=float, default=0.8, help="largest_n_at_efficiency's bound, (0, 1] (default: %(default)s)"
    )
    sub.add_argument("--probe-seconds", type=int, default=10, help="each fabric probe's time (default: %(default)s)")
    sub.add_argument("--wait", action="store_true", help="follow the plan until its runs have ended, then answer")
    sub.add_argument("--interval", type=positive, default=5.0, help="--wait: seconds between looks (default: 5)")
    sub.add_argument("--run", action="store_true", help="once answered, submit the experiment it recommends")


COMMANDS = (
    Command(
        "plan",
        plan,
        "Plan an experiment: probe the fabric, time one process, predict every grid point before paying for it",
        "Submits the file's fabric probes (one per node count and processes per node of its grid) and a 1-process "
        "run per strategy; once they end, prints every grid point's predicted step and epoch time, speed-up, "
        "efficiency, memory per GPU and GPU-hours, the whole grid's GPU-hours, and the strategy and GPU count the "
        "goal recommends. Exits 1 when a run the plan needs did not complete (its points say why none).",
        _arguments,
        (
            "scalelab plan experiment.json --wait",
            "scalelab plan experiment.json --goal largest_n_at_efficiency --efficiency 0.7 --wait --run",
            "scalelab plan --show 3f2a9c0d1e4b5a6c",
        ),
    ),
)
