"""Time to accuracy against throughput: the README's time-to-accuracy example through a real scalelab server.

The example (examples/time-to-accuracy.json) trains the digits MLP to 95 % validation accuracy under weak scaling on
1, 2 and 4 processes with two learning-rate rules (linear and sqrt), 5 repeats each. The baseline is what every
other scaling tool reports, the throughput speed-up (time per step at the smallest count over time per step at N,
times N); beside it, per GPU count and rule, the effective speed-up (time to target at the baseline over time to
target at N, MLPerf-scored, with its 95 % interval), the statistical efficiency (epochs to target at the baseline
over epochs at N) and how many runs did not reach the target. Then what one `GET .../scaling` of the finished
experiment costs the server: CPU time per request, beside its wall time.

No timing target is asserted: the figures are what they are on this machine, and the point is the gap between the
two speed-ups. Runs on the local Slurm where it is up (scripts/slurm-local up), else on the local scheduler.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from benches.common import REPO, BenchError, load_average, slurm_is_up, table, work_dir
from benches.reads import cpu_ms_per_get
from benches.server_process import ServerDidNotStart, running_server
from benches.web import server_pid
from contract.states import RunState

EXAMPLE = REPO / "examples" / "time-to-accuracy.json"
FINAL = frozenset(state.value for state in RunState if state.is_final)
# A run of the example takes seconds; 30 of them one at a time, on a loaded 2-core machine, some minutes.
WAIT_S = 3600.0
SCALING_REQUESTS = 20


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benches.time_to_accuracy", description=__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="runs per point (default 5: MLPerf's olympic scoring)")
    parser.add_argument("--request", type=Path, default=EXAMPLE, help="the experiment to run (default: the example)")
    parser.add_argument("--tmp", type=Path, help="where to put the server's database and run directories")
    return parser


def _interval(low: float | None, high: float | None) -> str:
    return f"[{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""


def _figure(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _wait(client: httpx.Client, experiment_id: str) -> dict[str, int]:
    deadline = time.monotonic() + WAIT_S
    last = ""
    while time.monotonic() < deadline:
        states: dict[str, int] = client.get(f"/api/experiments/{experiment_id}").raise_for_status().json()["states"]
        shown = ", ".join(f"{count} {state}" for state, count in sorted(states.items()))
        if shown != last:
            print(f"  {time.strftime('%H:%M:%S')} {shown}", file=sys.stderr, flush=True)
            last = shown
        if set(states) <= FINAL:
            return states
        time.sleep(2)
    raise BenchError(f"the experiment's runs did not end within {WAIT_S:.0f} s: {last}")


def _ingested(client: httpx.Client, experiment_id: str) -> dict[str, Any]:
    """The scaling answer once every run's output has been read (a run ends before its last lines are read)."""
    deadline = time.monotonic() + 120
    while True:
        rows = client.get(f"/api/experiments/{experiment_id}/compare").raise_for_status().json()["data"]
        if all(row["ingest_done"] for row in rows) or time.monotonic() > deadline:
            answer: dict[str, Any] = client.get(f"/api/experiments/{experiment_id}/scaling").raise_for_status().json()
            return answer
        time.sleep(1)


def rows_of(scaling: dict[str, Any]) -> list[list[str]]:
    """One line per series and GPU count: throughput speed-up (the baseline) beside effective speed-up."""
    lines = []
    for series in scaling["series"]:
        target = series.get("time_to_target")
        if target is None:
            continue
        throughput = {point["gpus"]: point for point in series["points"]}
        for point in target["points"]:
            measured = throughput.get(point["gpus"], {})
            lines.append(
                [
                    series["series"],
                    str(point["gpus"]),
                    str(point["global_batch_size"] or "-"),
                    f"{_figure(measured.get('speedup'))} "
                    f"{_interval(measured.get('speedup_ci_low'), measured.get('speedup_ci_high'))}".rstrip(),
                    f"{_figure(point['effective_speedup'])} "
                    f"{_interval(point['effective_speedup_ci_low'], point['effective_speedup_ci_high'])}".rstrip(),
                    _figure(point["statistical_efficiency"]),
                    f"{_figure(point['time_to_target_s'])} {_interval(point['ci_low_s'], point['ci_high_s'])}".rstrip(),
                    f"{point['scoring'] or 'none'}, n {point['n']}",
                    _figure(point["epochs_to_target"], 1),
                    f"{point['not_reached']} of {point['runs']}",
                    ", ".join(flag["code"] for flag in point["flags"]) or "-",
                ]
            )
    return lines


HEADER = [
    "series",
    "GPUs",
    "batch",
    "throughput speed-up (baseline)",
    "effective speed-up",
    "stat. eff.",
    "time to target s",
    "scoring",
    "epochs",
    "not reached",
    "flags",
]


def run(request: dict[str, Any], work: Path) -> int:
    scheduler = "slurm" if slurm_is_up() else "local"
    with running_server(work, scheduler) as url, httpx.Client(base_url=url, timeout=120) as client:
        started = time.perf_counter()
        created = client.post("/api/experiments", json=request)
        if created.status_code != 201:
            raise BenchError(f"the example was refused ({created.status_code}): {created.text[:500]}")
        experiment_id = created.json()["id"]
        print(f"{created.json()['run_count']} runs on the {scheduler} scheduler ({load_average()})", file=sys.stderr)
        states = _wait(client, experiment_id)
        scaling = _ingested(client, experiment_id)
        wall = time.perf_counter() - started
        path = f"/api/experiments/{experiment_id}/scaling"
        cpu_ms, wall_ms = cpu_ms_per_get(client, [path], server_pid(url), SCALING_REQUESTS)
    print(f"\nTime to accuracy: {request['name']}")
    shape = f"{request.get('scaling', 'strong')} scaling, repeats {request.get('repeats', 1)}"
    print(f"target {json.dumps(request.get('target'))}, {shape}; the grid took {wall:.0f} s ({scheduler} scheduler)")
    print(table(HEADER, rows_of(scaling)))
    for series in scaling["series"]:
        if series.get("time_to_target"):
            print(f"\n{series['series']}: {series['time_to_target']['summary']}")
            print(f"  throughput: {series['recommendation']}")
    print(f"\nGET {path.replace(experiment_id, '{id}')}: {cpu_ms:.1f} ms server CPU per request "
          f"({wall_ms:.1f} ms wall), over {SCALING_REQUESTS} requests of the finished experiment")  # fmt: skip
    return 0 if set(states) == {"completed"} else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    request = json.loads(args.request.read_text())
    request["repeats"] = args.repeats
    try:
        with work_dir(args.tmp) as work:
            return run(request, work)
    except (BenchError, ServerDidNotStart, httpx.HTTPError) as exc:
        print(f"benches.time_to_accuracy: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
