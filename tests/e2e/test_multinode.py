"""A 2-node x 2-process DDP run on the real two-node Slurm (scripts/slurm-local up --nodes 2), end to end."""

from __future__ import annotations

import json
import subprocess
import time

import httpx
import pytest

from tests.factories import experiment_request

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

ENDED = {"completed", "failed", "cancelled", "timeout", "node_fail", "out_of_memory"}


def _slurm(env: dict[str, str], *argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30, check=True).stdout


def test_ddp_across_two_nodes_completes_and_reports(slurm2_server, slurm2_env, tmp_path):
    request = experiment_request(
        name="two nodes, two processes each",
        base={"model": "mlp", "dataset": "synthetic", "epochs": 2, "global_batch_size": 64, "seed": 0},
        grid={"strategy": ["ddp"], "gpus": [4]},
        resources={"nodes": 2, "time_limit": "00:10:00"},
    )
    response = httpx.post(f"{slurm2_server}/api/experiments", json=request, timeout=60)
    assert response.status_code == 201, response.text
    (run,) = response.json()["runs"]
    assert (run["spec"]["nodes"], run["spec"]["gpus"]) == (2, 4)

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        detail = httpx.get(f"{slurm2_server}/api/runs/{run['id']}", timeout=10).json()
        if detail["state"] in ENDED:
            break
        time.sleep(1)
    server_log = (tmp_path / "server.log").read_text()[-3000:]
    assert detail["state"] == "completed", json.dumps(detail, indent=1) + server_log
    assert (detail["scheduler_state"], detail["exit_code"]) == ("COMPLETED", "0:0")

    # The monitor's last read follows the final state by one cycle.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        metrics = httpx.get(f"{slurm2_server}/api/runs/{run['id']}/metrics", timeout=10).json()["data"]
        if any(record["kind"] == "end" for record in metrics):
            break
        time.sleep(0.5)
    kinds = [record["kind"] for record in metrics if record["kind"] not in ("memory", "timing", "launch", "compute")]
    assert kinds == ["start", "epoch", "epoch", "end"], metrics
    start = next(record for record in metrics if record["kind"] == "start")
    assert (start["world_size"], start["nodes"], start["backend"], start["strategy"]) == (4, 2, "gloo", "ddp")
    assert {record["rank"] for record in metrics if record["kind"] == "memory"} == {0, 1, 2, 3}
    assert next(record for record in metrics if record["kind"] == "end")["status"] == "completed"

    # Slurm ran the training step (srun, id <job>.0) on both nodes of the cluster.
    sacct = _slurm(slurm2_env, "sacct", "-n", "-P", "-j", run["job_id"], "-o", "JobID,NodeList,NTasks")
    steps = {row.split("|")[0]: row.split("|")[1:] for row in sacct.splitlines()}
    nodelist, ntasks = steps[f"{run['job_id']}.0"]
    hosts = _slurm(slurm2_env, "scontrol", "show", "hostnames", nodelist).split()
    assert set(hosts) == set(_slurm(slurm2_env, "sinfo", "-h", "-N", "-o", "%N").split())
    assert len(hosts) == 2
    assert ntasks == "4"
    # Rank 0 runs on the allocation's first node (MASTER_ADDR), which has a hostname of its own.
    assert start["hostname"] == hosts[0]
