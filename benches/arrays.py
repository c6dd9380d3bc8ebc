"""Submitting a 256-run sweep as one Slurm job array against one job per run, through a real scalelab server on
the local Slurm: sbatch calls, the controller's RPCs (sdiag, after minus before), the submit's wall time and the
server's CPU time.

Each side is a server of its own (SCALELAB_JOB_ARRAYS true or false) on the same Slurm; every job is held (an
`sbatch` wrapper adds --hold and notes each call) and cancelled once counted, so nothing runs. sdiag's counts are
the whole controller's: any other client of the same Slurm meanwhile adds to them (said beside the figures).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benches.common import BenchError, load_average, slurm_is_up, table, work_dir
from benches.held_jobs import SLURM_TIMEOUT_S, SlurmCommandFailed, cancel, hold_wrapper, queue
from benches.server_process import ServerDidNotStart, running_server
from benches.web import cpu_seconds, server_pid

# sdiag's lines of RPCs by message type: "\tREQUEST_SUBMIT_BATCH_JOB  ( 4003) count:12 ave_time:..."
_RPC = re.compile(r"^\s*([A-Z0-9_]+)\s+\(\s*\d+\)\s+count:(\d+)")
SUBMIT_RPC = "REQUEST_SUBMIT_BATCH_JOB"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benches.arrays", description=__doc__)
    parser.add_argument("--runs", type=int, default=256, help="runs in the sweep (default 256)")
    parser.add_argument("--tmp", type=Path, help="where to put the servers' databases and run directories")
    return parser


# A grid axis holds at most 64 values: seeds times repeats make the sweep.
SEEDS = 64


def _sweep(runs: int, name: str) -> dict[str, Any]:
    """Seeds (and repeats of each) of one tiny run: scripts that differ only in what names the run. Shared nodes:
    no turns to take."""
    seeds = min(runs, SEEDS)
    return {
        "name": name,
        "base": {"model": "mlp", "dataset": "synthetic", "strategy": "ddp", "epochs": 1, "global_batch_size": 16},
        "grid": {"gpus": [1], "seed": list(range(seeds))},
        "repeats": runs // seeds,
        "isolation": "shared",
        "resources": {"nodes": 1, "time_limit": "00:10:00"},
    }


def rpc_counts() -> dict[str, int]:
    """The controller's RPC counts by message type since its statistics were last reset (sdiag)."""
    result = subprocess.run(["sdiag"], capture_output=True, text=True, timeout=SLURM_TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise BenchError(f"sdiag failed: {result.stderr.strip()}")
    counts: dict[str, int] = {}
    by_type = result.stdout.split("Remote Procedure Call statistics by message type", 1)[-1]
    for line in by_type.split("Remote Procedure Call statistics by user", 1)[0].splitlines():
        match = _RPC.match(line)
        if match:
            counts[match[1]] = int(match[2])
    return counts


@dataclass(frozen=True)
class Measured:
    sbatch_calls: int
    submit_rpcs: int
    all_rpcs: int
    wall_s: float
    server_cpu_s: float | None
    queue_entries: int


def _calls(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _post(client: httpx.Client, request: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/api/experiments", json=request)
    if response.status_code != 201:
        raise BenchError(f"POST /api/experiments answered {response.status_code}: {response.text[:500]}")
    body: dict[str, Any] = response.json()
    unsubmitted = [run for run in body["runs"] if not run["job_id"]]
    if unsubmitted:
        raise BenchError(f"{len(unsubmitted)} runs not submitted: {unsubmitted[0]['message']}")
    return body


def _withdraw(client: httpx.Client, body: dict[str, Any]) -> None:
    """Cancel the sweep's jobs (an array by its id) and wait until the server has seen every run cancelled."""
    job_ids = sorted({run["job_id"].split("_")[0] for run in body["runs"]})
    cancel(job_ids)
    deadline = time.monotonic() + SLURM_TIMEOUT_S
    while client.get(f"/api/experiments/{body['id']}").json()["states"] != {"cancelled": len(body["runs"])}:
        if time.monotonic() > deadline:
            raise BenchError("the server did not see every run cancelled within a minute")
        time.sleep(0.5)


def _side(tmp: Path, runs: int, arrays: bool) -> Measured:
    calls = tmp / "sbatch.calls"
    env = hold_wrapper(tmp / "bin", calls)
    server_env = {"PATH": env["PATH"], "SCALELAB_JOB_ARRAYS": str(arrays).lower()}
    with running_server(tmp, "slurm", server_env) as url, httpx.Client(base_url=url, timeout=600) as client:
        # A fresh server's first request pays for imports and connections: a served one is timed.
        _withdraw(client, _post(client, _sweep(4, "array benchmark: warm-up")))
        pid = server_pid(url)
        before_calls, before_rpcs, before_cpu = _calls(calls), rpc_counts(), cpu_seconds(pid)
        started = time.perf_counter()
        body = _post(client, _sweep(runs, f"array benchmark: arrays {arrays}"))
        wall = time.perf_counter() - started
        after_cpu, after_rpcs, after_calls = cpu_seconds(pid), rpc_counts(), _calls(calls)
        entries = len({run["job_id"].split("_")[0] for run in body["runs"]})
        _withdraw(client, body)
    cpu = None if before_cpu is None or after_cpu is None else after_cpu - before_cpu
    return Measured(
        sbatch_calls=after_calls - before_calls,
        submit_rpcs=after_rpcs.get(SUBMIT_RPC, 0) - before_rpcs.get(SUBMIT_RPC, 0),
        # Less the one sdiag (REQUEST_STATS_INFO) that read the first figures.
        all_rpcs=sum(after_rpcs.values()) - sum(before_rpcs.values()) - 1,
        wall_s=wall,
        server_cpu_s=cpu,
        queue_entries=entries,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    print(f"== Job arrays: a {args.runs}-run sweep as one Slurm array vs one job per run ==")
    if not slurm_is_up():
        print("SKIPPED: the local Slurm is not up (scripts/slurm-local up)")
        return 1 if os.environ.get("SCALELAB_REQUIRE_SLURM") == "1" else 0
    if not 2 <= args.runs <= 1000 or (args.runs > SEEDS and args.runs % SEEDS):
        raise SystemExit(f"--runs must be from 2 to {SEEDS}, or a multiple of {SEEDS} up to 1000 (one array)")
    print(f"before: {load_average()}")
    with work_dir(args.tmp) as tmp:
        try:
            per_run = _side(tmp / "per-run", args.runs, arrays=False)
            array = _side(tmp / "array", args.runs, arrays=True)
        except (BenchError, ServerDidNotStart, SlurmCommandFailed) as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            _cancel_left(tmp)
            return 1
    print(f"after: {load_average()}")
    _report(per_run, array, args.runs)
    return 0


def _cancel_left(tmp: Path) -> None:
    """Cancel what a failure left in the queue: the jobs and arrays named after this benchmark's runs."""
    names = {f"scalelab-{run.name}" for run in tmp.glob("*/runs/*")} | {
        f"scalelab-array-{run.name}" for run in tmp.glob("*/runs/*")
    }
    try:
        cancel([job_id.split("_")[0] for job_id, name, _ in queue() if name in names])
    except SlurmCommandFailed as exc:
        print(f"WARNING: jobs of this benchmark may be left in the queue: {exc}", file=sys.stderr)


def _report(per_run: Measured, array: Measured, runs: int) -> None:
    def cpu(side: Measured) -> str:
        return "unknown" if side.server_cpu_s is None else f"{side.server_cpu_s:.2f}"

    rows = [
        ["sbatch calls", str(per_run.sbatch_calls), str(array.sbatch_calls)],
        ["queue entries (job ids)", str(per_run.queue_entries), str(array.queue_entries)],
        [f"controller RPCs {SUBMIT_RPC}", str(per_run.submit_rpcs), str(array.submit_rpcs)],
        ["controller RPCs, all types", str(per_run.all_rpcs), str(array.all_rpcs)],
        ["submit wall time, s", f"{per_run.wall_s:.2f}", f"{array.wall_s:.2f}"],
        ["server CPU time, s", cpu(per_run), cpu(array)],
    ]
    print(table([f"{runs}-run sweep", "one job per run", "one array"], rows))
    print(
        "RPCs are sdiag's counts after the POST minus before, the whole controller's: any other client of this "
        "Slurm meanwhile (and the server's own monitor, polling once a cycle) adds to them. The server's CPU time "
        "is its process's, the sbatch it runs apart."
    )


if __name__ == "__main__":
    raise SystemExit(main())
