"""The whole path on the real local Slurm: HTTP in, sbatch, srun, the worker, metrics back over HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.factories import EXAMPLE_REQUEST

pytestmark = [pytest.mark.slurm, pytest.mark.torch]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(slurm, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "SCALELAB_DATABASE_URL": f"sqlite:///{tmp_path / 'scalelab.db'}",
        "SCALELAB_RUNS_DIR": str(tmp_path / "runs"),
        "SCALELAB_SCHEDULER": "slurm",
        "SCALELAB_WORKER_PYTHON": sys.executable,
        "SCALELAB_POLL_INTERVAL_S": "1",
    }
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "server", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{url}/openapi.json", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                assert process.poll() is None, (tmp_path / "server.log").read_text()
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()


def test_readme_experiment_runs_on_slurm(server, tmp_path):
    request = json.loads(EXAMPLE_REQUEST.read_text())
    response = httpx.post(f"{server}/api/experiments", json=request, timeout=60)
    assert response.status_code == 201, response.text
    experiment = response.json()
    runs = experiment["runs"]
    assert [run["spec"]["gpus"] for run in runs] == [1, 2, 4]
    assert all(run["state"] == "submitted" and run["job_id"].isdigit() for run in runs)

    seen_states: set[str] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        listed = httpx.get(f"{server}/api/runs", params={"experiment_id": experiment["id"]}, timeout=10).json()
        states = {run["state"] for run in listed["data"]}
        seen_states |= states
        if states <= {"completed", "failed", "cancelled", "timeout", "node_fail", "out_of_memory"}:
            break
        time.sleep(1)
    assert states == {"completed"}, json.dumps(listed, indent=1) + (tmp_path / "server.log").read_text()[-3000:]
    assert seen_states & {"pending", "running"}, "the monitor never saw a live state"

    for run in runs:
        detail = httpx.get(f"{server}/api/runs/{run['id']}", timeout=10).json()
        assert (detail["scheduler_state"], detail["exit_code"]) == ("COMPLETED", "0:0")
        # The monitor's last read follows the final state by one cycle.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            metrics = httpx.get(f"{server}/api/runs/{run['id']}/metrics", timeout=10).json()
            if metrics["data"] and metrics["data"][-1]["kind"] == "end":
                break
            time.sleep(0.5)
        kinds = [record["kind"] for record in metrics["data"]]
        assert kinds == ["start", "epoch", "epoch", "end"], metrics
        start = metrics["data"][0]
        assert start["world_size"] == run["spec"]["gpus"]
        assert (start["backend"], start["strategy"]) == ("gloo", "ddp")
        assert [record["epoch"] for record in metrics["data"] if record["kind"] == "epoch"] == [1, 2]

    compare = httpx.get(f"{server}/api/experiments/{experiment['id']}/compare", timeout=10).json()
    assert compare["count"] == 3
    assert [row["gpus"] for row in compare["data"]] == [1, 2, 4]
    for row in compare["data"]:
        assert row["epochs_done"] == 2
        assert row["mean_epoch_time_s"] > 0
        assert row["final_val_accuracy"] > 0.5
        assert row["peak_memory_bytes"] > 0
