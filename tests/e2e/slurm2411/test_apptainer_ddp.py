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
import pwd
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benches.server_process import running_server
from tests.e2e.runs import output_of, wait_until_ended
from tests.e2e.slurm2411.cluster import REPO, SIF
from tests.factories import experiment_request

pytestmark = [pytest.mark.slurm2411, pytest.mark.container]

LOG = logging.getLogger(__name__)  # the timings: pytest -o log_cli=true --log-cli-level=INFO


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
    kinds = [record["kind"] for record in metrics if record["kind"] not in ("memory", "timing", "launch", "compute")]
    assert kinds == ["start", "epoch", "epoch", "end"], metrics
    start = next(record for record in metrics if record["kind"] == "start")
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
    fatal = next(line for line in output.splitlines() if line.startswith("FATAL:"))
    assert "no-such-image.sif: no such file or directory" in fatal, output
    # apptainer's own words and what to do, where the API and the dashboard show why a run failed
    # (the job's own exit code is the batch script's, not apptainer's 255)
    assert ended["message"].startswith("the job exited with code "), ended["message"]
    assert (
        f"; the container runtime did not start it: {fatal}; the image does not exist at that path on the compute "
        "nodes" in ended["message"]
    ), ended["message"]


@pytest.fixture
def users_server(cluster_path: str, work: Path, host_user: str) -> Iterator[str]:
    """A server that runs as a user of the host, not root, as a service account does on a login node: the
    wrappers run its sbatch as that user, so its jobs run as that user too. Its directory is that user's own."""
    entry = pwd.getpwnam(host_user)
    profiles = work / "profiles"
    write_profile(profiles, "unreadable2411", work / "private.sif")
    # an image only root may read (apptainer opens it before it looks inside)
    with (work / "private.sif").open("wb") as image, SIF.open("rb") as original:
        image.write(original.read(1 << 20))
    (work / "private.sif").chmod(0o600)
    for path in (work, *work.rglob("*.toml")):
        os.chown(path, entry.pw_uid, entry.pw_gid)
    env = {
        "PATH": cluster_path,
        "SCALELAB_PROFILES_DIR": str(profiles),
        "SCALELAB_PROFILE": "unreadable2411",
        # this checkout and this environment's packages, under a Python the user may run
        "PYTHONPATH": os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]]),
    }
    with running_server(work, "slurm", env, installed=python_for_users(work), user=host_user) as url:
        yield url


def python_for_users(work: Path) -> Path:
    """An "installation" (running_server's PREFIX/app and PREFIX/venv/bin/python) of this checkout whose Python
    any user may run: the system's of this version (this environment's may lie in root's home)."""
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if not system.is_file():
        pytest.skip(f"no {system}: a server as another user needs a Python that user may run")
    prefix = work / "install"
    (prefix / "venv" / "bin").mkdir(parents=True)
    (prefix / "venv" / "bin" / "python").symlink_to(system)
    (prefix / "app").symlink_to(REPO)
    return prefix


def test_an_image_the_jobs_user_cannot_read_fails_the_run_saying_so_and_what_to_do(users_server, work, host_user):
    request = experiment_request(
        name="unreadable image",
        base={"model": "mlp", "dataset": "synthetic", "epochs": 1, "global_batch_size": 64, "seed": 0},
        grid={"strategy": ["ddp"], "gpus": [2]},
        resources={"nodes": 1, "time_limit": "00:10:00"},
    )
    response = httpx.post(f"{users_server}/api/experiments", json=request, timeout=60)
    assert response.status_code == 201, response.text
    (run,) = response.json()["runs"]
    ended = wait_until_ended(users_server, run["id"], work / "server.log", timeout_s=120)
    output = output_of(users_server, run["id"])
    assert ended["state"] == "failed", output
    # the job ran as the server's user: Slurm's record says so
    assert Path(ended["run_dir"]).stat().st_uid == pwd.getpwnam(host_user).pw_uid
    fatal = next(line for line in output.splitlines() if line.startswith("FATAL:"))
    assert fatal.endswith("private.sif is not readable by the current user, check permissions"), output
    assert ended["message"].startswith("the job exited with code "), ended["message"]
    assert (
        f"; the container runtime did not start it: {fatal}; the image must be readable by the user the job runs as"
        in ended["message"]
    ), ended["message"]
    # no digest: the job's sha256sum could not read the image either
    assert ended["image_digest"] is None
