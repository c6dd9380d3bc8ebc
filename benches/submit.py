"""Submitting a sweep through scalelab against the same sbatch calls in a plain shell loop, on the same Slurm.

scalelab's side is the wall time from before `POST /api/experiments` until its response, which comes once every
run is submitted. The baseline is bash running `sbatch --parsable --chdir=DIR DIR/job.sbatch` for the same number
of batch scripts that scalelab rendered, the very command scalelab runs per run. Both sides run in this one
invocation, interleaved, and each side's jobs are cancelled (and seen cancelled) before the next side starts, so
both face the same queue.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from benches.common import BenchError, load_average, median, slurm_is_up, table, work_dir
from benches.held_jobs import (
    LIVE_STATES,
    SLURM_TIMEOUT_S,
    SlurmCommandFailed,
    cancel,
    cancel_jobs_of_runs,
    hold_wrapper,
    queue,
)
from benches.server_process import ServerDidNotStart, running_server

TARGET_RATIO = 1.2
GPUS = [1, 2, 4, 8]  # the grid's second axis: a scaling sweep's, so the scripts differ as a real sweep's do
BASELINE_LOOP = 'for dir in "$@"; do sbatch --parsable --chdir="$dir" "$dir/job.sbatch" || exit 1; done'


@dataclass(frozen=True)
class Breakdown:
    """Where scalelab's wall time went, from the runs' submitted_at stamps (one per sbatch that returned)."""

    before_s: float  # from the POST to the first sbatch call: validate, expand, write files, commit
    per_run_s: float  # between consecutive submissions: one sbatch and the commit of its job id
    after_s: float  # from the last submission to the response in hand


@dataclass
class Side:
    name: str
    wall_s: dict[int, float] = field(default_factory=dict)  # by repetition
    breakdowns: dict[int, Breakdown] = field(default_factory=dict)

    def median_s(self) -> float:
        return median(list(self.wall_s.values()))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benches.submit", description=__doc__)
    parser.add_argument(
        "--runs", type=int, default=100, help=f"runs in the sweep, a multiple of {len(GPUS)} (default 100)"
    )
    parser.add_argument("--repeats", type=int, default=4, help="measurements of each side; the median is reported")
    parser.add_argument("--tmp", type=Path, help="where to put the server's database and run directories")
    return parser


def _sweep(runs: int, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "base": {"model": "mlp", "dataset": "synthetic", "strategy": "ddp", "epochs": 2, "global_batch_size": 64},
        "grid": {"seed": list(range(runs // len(GPUS))), "gpus": GPUS},
        "resources": {"nodes": 1, "time_limit": "00:10:00"},
    }


def _slurm(argv: Sequence[str], env: dict[str, str] | None = None) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=SLURM_TIMEOUT_S, env=env, check=False)
    if result.returncode != 0:
        raise BenchError(f"{shlex.join(argv[:2])} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def _check_capacity(needed: int) -> str:
    """Refuse to start if the jobs this benchmark submits would not all fit under MaxJobCount."""
    config = _slurm(["scontrol", "show", "config"])
    settings = {key.strip(): value.strip() for key, _, value in (line.partition(" = ") for line in config.splitlines())}
    max_jobs = int(settings["MaxJobCount"])
    min_age = settings.get("MinJobAge", "?")
    known = queue()
    live = sum(state in LIVE_STATES for _, _, state in known)
    # Cancelled jobs stay counted until MinJobAge has passed, so every job of every side counts at once.
    if len(known) + needed > max_jobs:
        raise BenchError(
            f"slurmctld knows {len(known)} jobs and this benchmark submits {needed}: over MaxJobCount {max_jobs}"
        )
    return (
        f"MaxJobCount {max_jobs}, MinJobAge {min_age}: slurmctld knows {len(known)} jobs ({live} pending or "
        f"running) and this benchmark adds {needed}, all held, each cancelled once counted"
    )


def _stamp(text: str) -> float:
    moment = datetime.fromisoformat(text)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _post_sweep(client: httpx.Client, request: dict[str, Any]) -> tuple[float, dict[str, Any], Breakdown]:
    posted_at = time.time()
    started = time.perf_counter()
    response = client.post("/api/experiments", json=request)
    wall = time.perf_counter() - started
    if response.status_code != 201:
        raise BenchError(f"POST /api/experiments answered {response.status_code}: {response.text[:500]}")
    body: dict[str, Any] = response.json()
    runs = body["runs"]
    # The monitor may already have seen a job pending (held) by the time the response is built.
    unsubmitted = [run for run in runs if run["state"] in ("created", "submit_failed") or not run["job_id"]]
    if len(runs) != len(request["grid"]["seed"]) * len(GPUS) or unsubmitted:
        first = f": {unsubmitted[0]['state']}, {unsubmitted[0]['message']}" if unsubmitted else ""
        raise BenchError(f"scalelab made {len(runs)} runs, {len(unsubmitted)} of them not submitted{first}")
    stamps = sorted(_stamp(run["submitted_at"]) for run in runs)
    per_run = (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1)
    # A submitted_at is stamped when its sbatch returned, so the first sbatch began about one interval earlier.
    breakdown = Breakdown(stamps[0] - per_run - posted_at, per_run, posted_at + wall - stamps[-1])
    return wall, body, breakdown


def _submit_loop(run_dirs: Sequence[str], env: dict[str, str]) -> tuple[float, list[str]]:
    started = time.perf_counter()
    result = subprocess.run(
        ["bash", "-c", BASELINE_LOOP, "bash", *run_dirs], capture_output=True, text=True, env=env, check=False
    )
    wall = time.perf_counter() - started
    job_ids = [line.split(";")[0] for line in result.stdout.split()]
    if result.returncode != 0 or len(job_ids) != len(run_dirs):
        cancel(job_ids)
        raise BenchError(f"the sbatch loop failed after {len(job_ids)} jobs: {result.stderr.strip()}")
    return wall, job_ids


def _wait_until_cancelled(client: httpx.Client, experiment_id: str, runs: int) -> None:
    """The server's monitor has recorded every run cancelled: it is idle again before the next side is timed."""
    deadline = time.monotonic() + SLURM_TIMEOUT_S
    while True:
        states = client.get(f"/api/experiments/{experiment_id}").raise_for_status().json()["states"]
        if states == {"cancelled": runs}:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"the server still shows {states} {SLURM_TIMEOUT_S:.0f} s after the jobs were cancelled")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.runs <= 0 or args.runs % len(GPUS) or args.runs // len(GPUS) > 64:
        raise SystemExit(f"--runs must be a multiple of {len(GPUS)} from {len(GPUS)} to {64 * len(GPUS)}")
    print(f"== Submission: a {args.runs}-run sweep through scalelab vs {args.runs} sbatch calls in a shell loop ==")
    if not slurm_is_up():
        # As the tests do: skip where no Slurm runs, fail where it must (SCALELAB_REQUIRE_SLURM=1, as in CI).
        print("SKIPPED: the local Slurm is not up (scripts/slurm-local up)")
        return 1 if os.environ.get("SCALELAB_REQUIRE_SLURM") == "1" else 0
    with work_dir(args.tmp) as tmp:
        try:
            return _bench(args, tmp)
        except (BenchError, ServerDidNotStart, SlurmCommandFailed) as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
        finally:
            try:
                cancel_jobs_of_runs(tmp / "runs")
            except SlurmCommandFailed as exc:
                # Said, not raised: the error that brought us here matters more, and this one names what is left.
                print(f"WARNING: jobs of this benchmark may be left in the queue: {exc}", file=sys.stderr)


def _bench(args: argparse.Namespace, tmp: Path) -> int:
    needed = (2 * args.repeats + 1) * args.runs
    print(f"{_slurm(['sbatch', '--version']).strip()}: {_check_capacity(needed)}")
    env = hold_wrapper(tmp / "bin")
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(tmp)], capture_output=True, text=True, check=False)
    print(
        f"sweep: mlp on synthetic data, ddp, seed 0-{args.runs // len(GPUS) - 1} x gpus {GPUS}; "
        f"{args.repeats} repetitions per side, interleaved; database and run directories in {tmp} "
        f"({fs.stdout.strip() or 'unknown file system'})"
    )
    print(f"before: {load_average()}")
    sides = {"baseline": Side("sbatch loop"), "scalelab": Side("scalelab")}
    with (
        # One job per run, as the baseline's loop submits them (an array against that: benches/arrays.py).
        running_server(tmp, "slurm", {"PATH": env["PATH"], "SCALELAB_JOB_ARRAYS": "false"}) as url,
        httpx.Client(base_url=url, timeout=600) as client,
    ):
        # The first request of a fresh server pays for imports and connections: time a served one, as users meet
        # it. This sweep's scripts are then the baseline's, so both sides submit the very same files.
        wall, warm_up, _ = _post_sweep(client, _sweep(args.runs, "submission benchmark: warm-up"))
        cancel([run["job_id"] for run in warm_up["runs"]])
        _wait_until_cancelled(client, warm_up["id"], args.runs)
        run_dirs = [run["run_dir"] for run in warm_up["runs"]]
        print(f"  warm-up, scalelab: {wall:.2f} s (not counted; its scripts are the baseline's)", flush=True)
        for rep in range(args.repeats):
            order = ["baseline", "scalelab"] if rep % 2 == 0 else ["scalelab", "baseline"]
            for key in order:
                side = sides[key]
                if key == "baseline":
                    wall, job_ids = _submit_loop(run_dirs, env)
                    cancel(job_ids)
                    detail = ""
                else:
                    request = _sweep(args.runs, f"submission benchmark: repetition {rep + 1}")
                    wall, created, breakdown = _post_sweep(client, request)
                    cancel([run["job_id"] for run in created["runs"]])
                    _wait_until_cancelled(client, created["id"], args.runs)
                    side.breakdowns[rep] = breakdown
                    detail = f"; {_describe(breakdown, args.runs)}"
                side.wall_s[rep] = wall
                load = os.getloadavg()[0]
                print(
                    f"  repetition {rep + 1}, {side.name}: {wall:.2f} s, {wall / args.runs * 1000:.1f} ms per job"
                    f"{detail} (load {load:.1f})",
                    flush=True,
                )
    print(f"after: {load_average()}")
    print()
    _report(sides["scalelab"], sides["baseline"], args)
    return 0


def _describe(b: Breakdown, runs: int) -> str:
    return (
        f"{b.before_s:.2f} s before the first sbatch, {runs} x {b.per_run_s * 1000:.1f} ms submitting, "
        f"{b.after_s:.2f} s answering"
    )


def _report(scalelab: Side, baseline: Side, args: argparse.Namespace) -> None:
    reps = range(args.repeats)
    rows = [
        [
            side.name,
            *[f"{side.wall_s[i]:.2f}" for i in reps],
            f"{side.median_s():.2f}",
            f"{side.median_s() / args.runs * 1000:.1f}",
        ]
        for side in (baseline, scalelab)
    ]
    print(table([f"seconds for {args.runs} jobs", *[f"rep {i + 1}" for i in reps], "median", "ms/job"], rows))
    print()
    ratio = scalelab.median_s() / baseline.median_s()
    paired = [scalelab.wall_s[i] / baseline.wall_s[i] for i in reps]
    meets = sum(r <= TARGET_RATIO for r in paired)
    verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
    if 0 < meets < len(paired):
        verdict += f", but only {meets} of {len(paired)} repetitions agree: rerun"
    print(
        f"scalelab / sbatch loop: {ratio:.2f}x (by repetition: {', '.join(f'{r:.2f}x' for r in paired)}); "
        f"target <= {TARGET_RATIO}x: {verdict}"
    )
    b = Breakdown(
        median([x.before_s for x in scalelab.breakdowns.values()]),
        median([x.per_run_s for x in scalelab.breakdowns.values()]),
        median([x.after_s for x in scalelab.breakdowns.values()]),
    )
    loop_per_job = baseline.median_s() / args.runs
    print(
        f"where scalelab's time goes (medians, from the runs' submitted_at): {_describe(b, args.runs)}; "
        f"each of its submissions takes {b.per_run_s / loop_per_job:.1f}x the loop's {loop_per_job * 1000:.1f} ms "
        f"per sbatch, and the {b.before_s + b.after_s:.2f} s around them has no counterpart in the loop"
    )
    print(
        "what each side does: scalelab validates the request, expands the grid, writes each run's spec.json and "
        "job.sbatch, commits the runs, then runs `sbatch --parsable --chdir=DIR DIR/job.sbatch` per run and commits "
        "its job id, and answers with every run; the baseline is bash running that same sbatch command on the "
        "scripts scalelab wrote in its warm-up sweep, and nothing else. Both call sbatch through one `sh` wrapper "
        "that adds --hold (sbatch 22.05 has no environment variable for it), so no job starts; each side's jobs are "
        "cancelled by id, and the server has recorded them cancelled, before the next side starts."
    )


if __name__ == "__main__":
    sys.exit(main())
