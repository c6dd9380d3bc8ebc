"""The whole path on the real local Slurm: HTTP in, sbatch, srun, the worker, metrics back over HTTP."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from datetime import datetime

import httpx
import pytest

from tests.factories import EXAMPLE_REQUEST

pytestmark = [pytest.mark.slurm, pytest.mark.torch]


def slurm_times(job_ids: list[str]) -> dict[str, tuple[datetime, datetime]]:
    """Each job's start and end as Slurm's accounting recorded them."""
    out = subprocess.run(
        ["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={','.join(job_ids)}",
         "--format=JobIDRaw,Start,End"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = [line.split("|") for line in out.splitlines() if line]
    return {job: (datetime.fromisoformat(begin), datetime.fromisoformat(end)) for job, begin, end in rows}


def test_readme_experiment_runs_on_slurm(slurm_server, tmp_path):
    request = json.loads(EXAMPLE_REQUEST.read_text())
    response = httpx.post(f"{slurm_server}/api/experiments", json=request, timeout=60)
    assert response.status_code == 201, response.text
    experiment = response.json()
    runs = experiment["runs"]
    epochs = request["base"]["epochs"]
    assert [run["spec"]["gpus"] for run in runs] == [1, 2]
    # Exclusive (the default) on the local profile's one shared node: the runs take turns.
    assert runs[0]["state"] == "submitted" and runs[0]["job_id"].isdigit()
    assert [(run["state"], run["waiting"]) for run in runs[1:]] == [("created", True)]

    seen_states: set[str] = set()
    deadline = time.monotonic() + 420
    while time.monotonic() < deadline:
        listed = httpx.get(f"{slurm_server}/api/runs", params={"experiment_id": experiment["id"]}, timeout=10).json()
        states = {run["state"] for run in listed["data"]}
        seen_states |= states
        if states <= {"completed", "failed", "cancelled", "timeout", "node_fail", "out_of_memory"}:
            break
        time.sleep(1)
    assert states == {"completed"}, json.dumps(listed, indent=1) + (tmp_path / "server.log").read_text()[-3000:]
    assert seen_states & {"pending", "running"}, "the monitor never saw a live state"

    job_ids = []
    for run in runs:
        detail = httpx.get(f"{slurm_server}/api/runs/{run['id']}", timeout=10).json()
        assert (detail["scheduler_state"], detail["exit_code"]) == ("COMPLETED", "0:0")
        job_ids.append(detail["job_id"])
        # The monitor's last read follows the final state by one cycle.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            metrics = httpx.get(f"{slurm_server}/api/runs/{run['id']}/metrics", timeout=10).json()
            if metrics["data"] and metrics["data"][-1]["kind"] == "launch":  # the launch's end, after the worker's
                break
            time.sleep(0.5)
        # The worker also prints each rank's peak memory and timings per epoch, and its compute probe after the
        # start; the run's own course is the rest.
        kinds = [record["kind"] for record in metrics["data"] if record["kind"] not in ("memory", "timing", "compute")]
        # The batch script times the launch around the worker: a record of its own before and after.
        assert kinds == ["launch", "start", *["epoch"] * epochs, "end", "launch"], metrics
        start = metrics["data"][1]
        assert start["world_size"] == run["spec"]["gpus"]
        assert (start["backend"], start["strategy"]) == ("gloo", "ddp")
        # Each process runs the threads of the one CPU Slurm gave its task, though the local Slurm lets it run on
        # every core: a baseline on more threads than its CPUs would make every speed-up against it too low.
        (node,) = start["nodes_hardware"]
        assert (node["intra_op_threads"], node["cpus_allocated"]) == (1, run["spec"]["gpus"])

    # Never two at once: each job started after the one before it ended.
    times = slurm_times(job_ids)
    spans = sorted(times[job] for job in job_ids)
    assert all(before[1] <= after[0] for before, after in itertools.pairwise(spans)), spans

    compare = httpx.get(f"{slurm_server}/api/experiments/{experiment['id']}/compare", timeout=10).json()
    assert compare["count"] == 2
    assert [row["gpus"] for row in compare["data"]] == [1, 2]
    for row in compare["data"]:
        assert row["epochs_done"] == epochs
        assert row["mean_epoch_time_s"] > 0
        # The worker's runs are measured by their epochs, their run time (start-up included) beside.
        assert row["measure"] == "epoch_time_s" and row["run_time_s"] > 0
        assert row["final_val_accuracy"] > 0.5
        assert row["peak_memory_bytes"] > 0
        codes = {flag["code"] for flag in row["flags"]}
        # The promise: no efficiency above 1.05 without a flag that explains it.
        if row["efficiency"] > 1.05:
            assert codes & {"superlinear", "oversubscribed"}, row
        # What a newcomer sees: as many processes as cores, each epoch long enough to time (a slower machine only
        # makes epochs longer).
        assert not codes & {"oversubscribed", "too_short"}, row


def test_a_run_beside_a_foreign_job_is_flagged_shared_node_with_its_id(slurm_server, tmp_path):
    """A job the test submits itself shares the one node with the run; Slurm's accounting names it after the end."""
    foreign = subprocess.run(
        ["sbatch", "--parsable", "--job-name=not-scalelab", f"--output={tmp_path}/foreign.out", "--wrap=sleep 90"],
        capture_output=True, text=True, check=True,
    ).stdout.strip().split(";")[0]  # fmt: skip
    try:
        request = json.loads(EXAMPLE_REQUEST.read_text())
        request.update(name="beside a foreign job", grid={"gpus": [1]})
        request["base"].update(epochs=2, width=256, global_batch_size=64)  # quick: its times do not matter here
        created = httpx.post(f"{slurm_server}/api/experiments", json=request, timeout=60).json()
        run_id = created["runs"][0]["id"]
        # Accounting asks about a run some seconds after its end (slurmdbd's query by node and time lags).
        deadline = time.monotonic() + 300
        row: dict = {}
        while time.monotonic() < deadline:
            row = httpx.get(f"{slurm_server}/api/compare", params={"run_id": run_id}, timeout=10).json()["data"][0]
            if row["resources"] is not None:
                break
            time.sleep(2)
        assert row["state"] == "completed" and row["resources"] is not None, row
        assert foreign in row["resources"]["shared_with"]
        shared = [flag for flag in row["flags"] if flag["code"] == "shared_node"]
        assert shared and foreign in shared[0]["message"], row["flags"]
        assert row["resources"]["elapsed_s"] > 0 and row["resources"]["device_kind"] == "cpu"
    finally:
        subprocess.run(["scancel", foreign], check=False)
