"""Inference experiments that wait in Slurm for their training run, on the real two-node cluster: one submitted
while its tiny gpt trains waits (pending, reason Dependency, in words), then runs and ends with its figures once
the training completed; one whose training is cancelled ends at once, saying so.

One module fixture submits both trainings and both inference experiments before anything ends.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import slurm2_server_in
from tests.e2e.runs import wait_until_ended
from tests.factories import tiny_gpt_request

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

PROMPTS = "def main(\nclass Foo:\n"


def _submit(url: str, request: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{url}/api/experiments", json=request, timeout=60)
    assert response.status_code == 201, response.text
    experiment: dict[str, Any] = response.json()
    return experiment


def _inference(training_run: str) -> dict[str, Any]:
    return {
        "name": f"generate from {training_run} once it has trained",
        "base": {"kind": "inference", "model": "gpt", "max_new_tokens": 6, "global_batch_size": 2, "gpus": 1},
        "inference": {"checkpoint_run": training_run, "prompts": PROMPTS},
        "resources": {"time_limit": "00:10:00"},
    }


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dependency-e2e")


@pytest.fixture(scope="module")
def server(slurm2_env: dict[str, str], work: Path) -> Iterator[str]:
    with slurm2_server_in(work, slurm2_env, SCALELAB_POLL_INTERVAL_S="1") as url:
        yield url


@pytest.fixture(scope="module")
def submitted(server: str, slurm2_env: dict[str, str]) -> dict[str, Any]:
    """Two trainings, and an inference of each submitted while it has not ended; the Slurm reason each inference
    job had right after its submission; then the second training cancelled."""
    trainings = {}
    for name in ("trains", "cancelled"):
        request = tiny_gpt_request()
        request["name"] = f"tiny gpt, {name}"
        request["base"]["epochs"] = 2  # checkpoint_every 1: a checkpoint each epoch
        trainings[name] = _submit(server, request)["runs"][0]
    inferences = {name: _submit(server, _inference(run["id"])) for name, run in trainings.items()}
    queued = {}
    for name, experiment in inferences.items():
        job = experiment["runs"][0]["job_id"]
        squeue = ["squeue", "--noheader", "-j", job, "-o", "%T %r %E"]
        queued[name] = subprocess.run(squeue, env=slurm2_env, capture_output=True, text=True, check=False).stdout
    cancel = httpx.post(f"{server}/api/runs/{trainings['cancelled']['id']}/cancel", timeout=30)
    assert cancel.status_code == 202, cancel.text
    return {"trainings": trainings, "inferences": inferences, "queued": queued}


def test_a_dependent_inference_waits_for_its_training_then_ends_with_its_figures(server, work, submitted):
    training = submitted["trainings"]["trains"]
    experiment = submitted["inferences"]["trains"]
    (run,) = experiment["runs"]
    words = f"waiting for training run {training['id']} to end"
    assert (run["after_run"], run["after_job"], run["waiting_for"]) == (training["id"], training["job_id"], words)
    # Slurm held it for the training's job, as squeue showed right after submitting: pending, the dependency
    # unfulfilled (the reason is Dependency once the scheduler has looked at it; on a busy cluster, Resources
    # before that).
    state, _reason, dependency = submitted["queued"]["trains"].split()
    assert state == "PENDING", submitted["queued"]
    assert dependency == f"afterok:{training['job_id']}(unfulfilled)", submitted["queued"]
    # The API says so in words while Slurm holds it for its dependency (the monitor's first polls).
    seen = httpx.get(f"{server}/api/runs/{run['id']}", timeout=10).json()
    if seen["state"] == "pending" and seen["scheduler_reason"] == "Dependency":
        assert seen["waiting_for"] == words, seen
    trained = wait_until_ended(server, training["id"], work / "server.log")
    assert trained["state"] == "completed", trained
    ended = wait_until_ended(server, run["id"], work / "server.log")
    assert ended["state"] == "completed", (ended, (Path(ended["run_dir"]) / "output.log").read_text()[-3000:])
    assert ended["waiting_for"] is None
    generations = httpx.get(f"{server}/api/runs/{run['id']}/generations", timeout=10).json()
    assert generations["complete"] and generations["count"] == 2
    (row,) = httpx.get(f"{server}/api/experiments/{experiment['id']}/inference", timeout=10).json()["data"]
    assert row["tokens_per_s"] > 0 and row["ttft_s"] > 0 and row["ingest_done"]


def test_a_dependent_inference_of_a_cancelled_training_ends_saying_so(server, work, submitted):
    training = submitted["trainings"]["cancelled"]
    (run,) = submitted["inferences"]["cancelled"]["runs"]
    assert wait_until_ended(server, training["id"], work / "server.log")["state"] == "cancelled"
    # Slurm cancels it (--kill-on-invalid-dep), or the monitor does on seeing the training's end, saying why.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ended = httpx.get(f"{server}/api/runs/{run['id']}", timeout=10).json()
        if ended["state"] == "cancelled" and ended["message"]:
            break
        time.sleep(1)
    assert ended["state"] == "cancelled", ended
    assert ended["started_at"] is None, ended  # never ran (Slurm or the monitor cancelled it, whichever came first)
    assert ended["message"].startswith(f"training run {training['id']} was cancelled: nothing to infer from"), ended
    # It cannot be resubmitted to wait for a training that will not end with a checkpoint.
    again = httpx.post(f"{server}/api/runs/{run['id']}/resubmit", timeout=30)
    assert again.status_code == 409 and "nothing to infer from" in again.text, again.text
