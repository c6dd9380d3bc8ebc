"""The containerized path: HTTP in, sbatch on the real local Slurm, each srun task in the worker image under
Podman, metrics back over HTTP, the image digest on the run; then "run again" on that digest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benches.server_process import running_server
from tests.conftest import WORKER_IMAGE as IMAGE
from tests.e2e.runs import output_of, wait_until_ended
from tests.factories import experiment_request

pytestmark = [pytest.mark.slurm, pytest.mark.container]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def server(slurm: None, worker_image: str, tmp_path: Path) -> Iterator[str]:
    env = {"SCALELAB_PROFILES_DIR": str(REPO / "examples" / "profiles")}
    with running_server(tmp_path, "slurm", env) as url:
        yield url


def test_each_task_trains_in_the_worker_image_and_the_run_records_its_digest(server, worker_image, tmp_path):
    request = experiment_request(
        name="in the worker image",
        base={"model": "mlp", "dataset": "synthetic", "epochs": 2, "global_batch_size": 64, "lr": 0.05, "seed": 0},
        grid={"strategy": ["ddp"], "gpus": [2]},
        resources={"profile": "podman", "nodes": 1, "time_limit": "00:10:00"},
    )
    response = httpx.post(f"{server}/api/experiments", json=request, timeout=60)
    assert response.status_code == 201, response.text
    (run,) = response.json()["runs"]
    log = tmp_path / "server.log"

    ended = wait_until_ended(server, run["id"], log)
    assert ended["state"] == "completed", output_of(server, run["id"])
    metrics = httpx.get(f"{server}/api/runs/{run['id']}/metrics", timeout=10).json()["data"]
    kinds = [record["kind"] for record in metrics if record["kind"] not in ("memory", "timing", "launch", "compute")]
    assert kinds == ["start", "epoch", "epoch", "end"], metrics
    start = next(record for record in metrics if record["kind"] == "start")
    assert (start["world_size"], start["backend"], start["device"]) == (2, "gloo", "cpu")
    # The image's torch (the CPU build), not the host's.
    assert start["torch_version"].endswith("+cpu")
    assert (start["image"], start["image_digest"]) == (IMAGE, worker_image)
    assert (ended["image"], ended["image_digest"], ended["torch_version"]) == (
        IMAGE,
        worker_image,
        start["torch_version"],
    )
    assert ended["worker_version"] and ended["source_revision"]
    # Both ranks took part: rank 0 prints the peak memory each one reported.
    ranks = {record["rank"] for record in metrics if record["kind"] == "memory"}
    assert ranks == {0, 1}, metrics

    again = httpx.post(f"{server}/api/runs/{run['id']}/rerun", timeout=60)
    assert again.status_code == 201, again.text
    repeated = wait_until_ended(server, again.json()["id"], log)
    assert repeated["state"] == "completed", output_of(server, repeated["id"])
    pinned = f"localhost/scalelab-worker@{worker_image}"
    assert (repeated["rerun_of"], repeated["image"], repeated["image_digest"]) == (run["id"], pinned, worker_image)
    assert repeated["spec"] == ended["spec"]
