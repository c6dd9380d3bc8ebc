"""The whole path on the real local Slurm: HTTP in, sbatch, srun, the worker, metrics back over HTTP."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.factories import EXAMPLE_REQUEST

pytestmark = [pytest.mark.slurm, pytest.mark.torch]


def test_readme_experiment_runs_on_slurm(slurm_server, tmp_path):
    request = json.loads(EXAMPLE_REQUEST.read_text())
    response = httpx.post(f"{slurm_server}/api/experiments", json=request, timeout=60)
    assert response.status_code == 201, response.text
    experiment = response.json()
    runs = experiment["runs"]
    assert [run["spec"]["gpus"] for run in runs] == [1, 2, 4]
    assert all(run["state"] == "submitted" and run["job_id"].isdigit() for run in runs)

    seen_states: set[str] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        listed = httpx.get(f"{slurm_server}/api/runs", params={"experiment_id": experiment["id"]}, timeout=10).json()
        states = {run["state"] for run in listed["data"]}
        seen_states |= states
        if states <= {"completed", "failed", "cancelled", "timeout", "node_fail", "out_of_memory"}:
            break
        time.sleep(1)
    assert states == {"completed"}, json.dumps(listed, indent=1) + (tmp_path / "server.log").read_text()[-3000:]
    assert seen_states & {"pending", "running"}, "the monitor never saw a live state"

    for run in runs:
        detail = httpx.get(f"{slurm_server}/api/runs/{run['id']}", timeout=10).json()
        assert (detail["scheduler_state"], detail["exit_code"]) == ("COMPLETED", "0:0")
        # The monitor's last read follows the final state by one cycle.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            metrics = httpx.get(f"{slurm_server}/api/runs/{run['id']}/metrics", timeout=10).json()
            if metrics["data"] and metrics["data"][-1]["kind"] == "end":
                break
            time.sleep(0.5)
        # The worker also prints each rank's peak memory per epoch; the run's own course is the rest.
        kinds = [record["kind"] for record in metrics["data"] if record["kind"] != "memory"]
        assert kinds == ["start", "epoch", "epoch", "end"], metrics
        start = metrics["data"][0]
        assert start["world_size"] == run["spec"]["gpus"]
        assert (start["backend"], start["strategy"]) == ("gloo", "ddp")
        assert [record["epoch"] for record in metrics["data"] if record["kind"] == "epoch"] == [1, 2]

    compare = httpx.get(f"{slurm_server}/api/experiments/{experiment['id']}/compare", timeout=10).json()
    assert compare["count"] == 3
    assert [row["gpus"] for row in compare["data"]] == [1, 2, 4]
    for row in compare["data"]:
        assert row["epochs_done"] == 2
        assert row["mean_epoch_time_s"] > 0
        assert row["final_val_accuracy"] > 0.5
        assert row["peak_memory_bytes"] > 0
