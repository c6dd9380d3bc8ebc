"""A 2-node x 2-process DDP run in Apptainer on the Slurm 24.11 cluster in containers (issue 20), end to end.

scripts/slurm-containers brings the cluster up (idempotent: a running one is kept); the server on the host uses
its wrapper commands (first on PATH) as its CLI scheduler's sbatch, squeue, sacct... Each task runs the worker
image as the SIF of `containers/build worker-sif`, and the run records the SIF's sha256 as its digest.
Skips where Podman, the image or the SIF is missing; fails instead when SCALELAB_REQUIRE_SLURM2411=1 (CI).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benches.server_process import running_server
from tests.factories import experiment_request

pytestmark = [pytest.mark.slurm2411, pytest.mark.container]

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "slurm-containers"
IMAGE = os.environ.get("SCALELAB_SLURM2411_IMAGE", "localhost/scalelab-slurm2411:latest")
STATE_DIR = Path(os.environ.get("SCALELAB_SLURM2411_STATE_DIR", "/var/lib/scalelab-slurm2411"))
SHARED = Path(os.environ.get("SCALELAB_SLURM2411_SHARED", str(STATE_DIR / "shared")).split(":")[0])
SIF = Path(os.environ.get("SCALELAB_SIF_DIR", str(SHARED / "images"))) / "scalelab-worker.sif"
LOG = logging.getLogger(__name__)  # the timings: pytest -o log_cli=true --log-cli-level=INFO
REQUIRED = os.environ.get("SCALELAB_REQUIRE_SLURM2411") == "1"
FINAL = {"completed", "failed", "cancelled", "timeout", "node_fail", "out_of_memory", "submit_failed"}


def _missing(message: str) -> None:
    if REQUIRED:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def cluster_path() -> str:
    """The cluster is up; the PATH whose Slurm commands are the 24.11 cluster's wrappers."""
    if os.geteuid() != 0 or shutil.which("podman") is None:
        _missing("the 24.11 cluster needs root and Podman (containers/build tools)")
    if subprocess.run(["podman", "image", "exists", IMAGE], check=False).returncode != 0:
        _missing(f"no image {IMAGE}: run containers/build slurm2411")
    if not SIF.is_file():
        _missing(f"no SIF {SIF}: run containers/build worker worker-sif")
    started = time.monotonic()
    up = subprocess.run([str(SCRIPT), "up"], capture_output=True, text=True, timeout=300, check=False)
    assert up.returncode == 0, up.stderr
    LOG.info("slurm-containers up: %.1f s", time.monotonic() - started)
    return f"{up.stdout.strip()}{os.pathsep}{os.environ['PATH']}"


@pytest.fixture
def work() -> Iterator[Path]:
    """The server's own directory (database, runs), in the directory the cluster shares with the host."""
    path = SHARED / "tests" / uuid.uuid4().hex[:12]
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def write_profile(directory: Path, name: str, image: Path) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.toml").write_text(
        f"""name = "{name}"
description = "The Slurm 24.11 cluster in containers; each task in the worker SIF under Apptainer"
default_partition = "debug"
signal_before_end_s = 30

[partitions.debug]
max_nodes = 2
gpus_per_node = 8
max_time = "1-00:00:00"

[container]
runtime = "apptainer"
image = "{image}"
python = "python3"
# root's apptainer asks for every capability, and these nodes lack CAP_SYS_RESOURCE: root runs drop privileges.
extra_args = ["--no-privs"]

[env]
GLOO_SOCKET_IFNAME = "eth0"
"""
    )


@pytest.fixture
def server(cluster_path: str, work: Path) -> Iterator[str]:
    profiles = work / "profiles"
    write_profile(profiles, "apptainer2411", SIF)
    write_profile(profiles, "missing2411", SIF.with_name("no-such-image.sif"))
    env = {
        "PATH": cluster_path,
        "SCALELAB_PROFILES_DIR": str(profiles),
        "SCALELAB_PROFILE": "apptainer2411",
    }
    with running_server(work, "slurm", env) as url:
        yield url


def wait_until_ended(url: str, run_id: str, log: Path, timeout_s: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run: dict[str, Any] = httpx.get(f"{url}/api/runs/{run_id}", timeout=10).json()
        if run["state"] in FINAL and run["ingest_done"]:
            return run
        time.sleep(1)
    raise AssertionError(f"run {run_id} did not end: {run}\n{log.read_text()[-3000:]}")


def output_of(url: str, run_id: str) -> str:
    return str(httpx.get(f"{url}/api/runs/{run_id}/log", timeout=10).json()["text"])


def test_ddp_in_apptainer_on_two_nodes_of_slurm_2411(server, cluster_path, work):
    request = experiment_request(
        name="apptainer on 24.11",
        base={"model": "mlp", "dataset": "synthetic", "epochs": 2, "global_batch_size": 64, "seed": 0},
        grid={"strategy": ["ddp"], "gpus": [4]},
        resources={"nodes": 2, "time_limit": "00:10:00"},
    )
    started = time.monotonic()
    response = httpx.post(f"{server}/api/experiments", json=request, timeout=60)
    assert response.status_code == 201, response.text
    (run,) = response.json()["runs"]
    log = work / "server.log"
    ended = wait_until_ended(server, run["id"], log)
    LOG.info("2x2 DDP run in Apptainer: %.1f s", time.monotonic() - started)
    assert ended["state"] == "completed", output_of(server, run["id"]) + log.read_text()[-3000:]
    assert (ended["scheduler_state"], ended["exit_code"]) == ("COMPLETED", "0:0")

    metrics = httpx.get(f"{server}/api/runs/{run['id']}/metrics", timeout=10).json()["data"]
    kinds = [record["kind"] for record in metrics if record["kind"] not in ("memory", "timing")]
    assert kinds == ["start", "epoch", "epoch", "end"], metrics
    start = metrics[0]
    assert (start["world_size"], start["nodes"], start["backend"], start["strategy"]) == (4, 2, "gloo", "ddp")
    assert start["torch_version"].endswith("+cpu")  # the image's torch
    assert {record["rank"] for record in metrics if record["kind"] == "memory"} == {0, 1, 2, 3}

    digest = "sha256:" + hashlib.sha256(SIF.read_bytes()).hexdigest()
    assert (ended["image"], ended["image_digest"]) == (str(SIF), digest)

    # Slurm 24.11 ran the training step on both nodes.
    env = {**os.environ, "PATH": cluster_path}
    sacct = subprocess.run(
        ["sacct", "-n", "-P", "-j", run["job_id"], "-o", "JobID,NodeList,NTasks"],
        capture_output=True, text=True, env=env, timeout=30, check=True,
    ).stdout  # fmt: skip
    steps = {row.split("|")[0]: row.split("|")[1:] for row in sacct.splitlines()}
    assert steps[f"{run['job_id']}.0"] == ["s24n[1-2]", "4"], sacct

    again = httpx.post(f"{server}/api/runs/{run['id']}/rerun", timeout=60)
    assert again.status_code == 201, again.text
    repeated = wait_until_ended(server, again.json()["id"], log)
    assert repeated["state"] == "completed", output_of(server, repeated["id"])
    assert (repeated["rerun_of"], repeated["image_digest"]) == (run["id"], digest)


def test_an_image_that_does_not_exist_fails_the_run_with_apptainers_message(server, work):
    request = experiment_request(
        name="no such image",
        base={"model": "mlp", "dataset": "synthetic", "epochs": 1, "global_batch_size": 64, "seed": 0},
        grid={"strategy": ["ddp"], "gpus": [2]},
        resources={"profile": "missing2411", "nodes": 1, "time_limit": "00:10:00"},
    )
    response = httpx.post(f"{server}/api/experiments", json=request, timeout=60)
    assert response.status_code == 201, response.text
    (run,) = response.json()["runs"]
    ended = wait_until_ended(server, run["id"], work / "server.log", timeout_s=120)
    output = output_of(server, run["id"])
    assert ended["state"] == "failed", output
    # apptainer's own words in the run's log (the run's `message` stays empty: the server does not lift
    # a container runtime's error into it yet, on 22.05 or 24.11 alike)
    assert "FATAL" in output and "no-such-image.sif: no such file or directory" in output, output
