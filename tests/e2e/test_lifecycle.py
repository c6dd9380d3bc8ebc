"""The whole job lifecycle on the real local Slurm: requeue and resume, the time-limit signal, a server killed
and restarted, an unreachable controller, runs a dead server left unsubmitted, and the concurrency limit."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlmodel import Session

from benches.server_process import running_server
from contract.rundir import TEST_ONLY_STEP_DELAY_VAR
from contract.states import RunState
from server.models import Run
from server.monitor import Monitor
from server.scheduler.slurm import SlurmScheduler
from tests.conftest import serving
from tests.factories import experiment_row, run_row

pytestmark = [pytest.mark.slurm]

FINAL = {"completed", "failed", "cancelled", "timeout", "node_fail", "out_of_memory", "preempted", "submit_failed"}


def request(name: str, **base) -> dict:
    fields = {"model": "mlp", "dataset": "synthetic", "strategy": "single", "gpus": 1, "epochs": 3}
    return {"name": name, "base": {**fields, **base}, "resources": {"time_limit": "00:10:00"}}


def submit(url: str, body: dict):
    response = httpx.post(f"{url}/api/experiments", json=body, timeout=120)
    assert response.status_code == 201, response.text
    return response.json()


def run_of(url: str, run_id: str):
    return httpx.get(f"{url}/api/runs/{run_id}", timeout=10).json()


def metrics_of(url: str, run_id: str):
    return httpx.get(f"{url}/api/runs/{run_id}/metrics", timeout=10).json()["data"]


def events_of(url: str, run_id: str):
    return httpx.get(f"{url}/api/runs/{run_id}/events", timeout=10).json()["data"]


def wait_until(what: str, check, timeout_s: float = 240, log: Path | None = None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(1)
    raise AssertionError(f"timed out waiting until {what}" + (f"\n{log.read_text()[-3000:]}" if log else ""))


def read_to_the_end(url: str, run_id: str):
    return wait_until(f"run {run_id} ended and was read", lambda: (r := run_of(url, run_id))["ingest_done"] and r)


def epochs(records: list[dict]) -> list[int]:
    return [record["epoch"] for record in records if record["kind"] == "epoch"]


# The seconds each training step of a paced server's jobs sleeps: 50 steps of the mlp take about 0.2 s of CPU, and
# with this an epoch takes 2.5 s or more, nearly all of it asleep.
PACE_S = "0.05"


@pytest.fixture
def paced_server(slurm: None, tmp_path: Path) -> Iterator[str]:
    """A server on the real local Slurm whose jobs sleep in each step (the worker's test-only delay): the tests
    whose jobs must outlive a requeue or a time limit would otherwise train flat out for minutes, on a CPU the
    tests beside them share."""
    env = {"SCALELAB_POLL_INTERVAL_S": "1", TEST_ONLY_STEP_DELAY_VAR: PACE_S}
    with serving(tmp_path, env) as url:
        yield url


@pytest.mark.torch
def test_a_requeued_job_resumes_from_its_checkpoint(paced_server, tmp_path):
    """Far more epochs than the test waits for, however fast the machine: the requeue always finds the run alive."""
    created = submit(paced_server, request("requeue", epochs=10_000, steps_per_epoch=50, checkpoint_every=1))
    run_id, job_id = created["runs"][0]["id"], created["runs"][0]["job_id"]
    # Epoch 2's record comes after epoch 1's checkpoint is saved: the requeued job has something to resume from.
    wait_until("an epoch was saved", lambda: 2 in epochs(metrics_of(paced_server, run_id)), log=tmp_path / "server.log")
    # What a preemption with PreemptMode=REQUEUE does to the job: kill it and queue it again.
    subprocess.run(["scontrol", "requeue", job_id], check=True, capture_output=True)

    def resumed_after():
        records = metrics_of(paced_server, run_id)
        resumes = [record["epoch"] for record in records if record["kind"] == "resume"]
        return resumes and epochs(records)[-1] > resumes[0] and resumes[0]

    after = wait_until(
        "the requeued job resumed and trained on", resumed_after, timeout_s=300, log=tmp_path / "server.log"
    )
    assert after >= 1
    httpx.post(f"{paced_server}/api/runs/{run_id}/cancel", timeout=30)
    assert read_to_the_end(paced_server, run_id)["state"] == "cancelled"

    records = metrics_of(paced_server, run_id)
    kinds = [record["kind"] for record in records if record["kind"] not in ("memory", "timing", "compute")]
    assert kinds.count("start") == 2 and kinds.count("resume") == 1, kinds
    seen = epochs(records)
    resume_at = [record["kind"] for record in records if record["kind"] in ("epoch", "resume")].index("resume")
    assert seen[resume_at] == after + 1  # the second start goes on from the checkpoint, not from epoch 1
    compare = httpx.get(f"{paced_server}/api/experiments/{created['id']}/compare", timeout=10).json()
    assert compare["data"][0]["epochs_done"] == len(set(seen)) == max(seen)  # each epoch once, though some ran twice
    assert "requeued" in [event["kind"] for event in events_of(paced_server, run_id)]


@pytest.mark.torch
def test_the_worker_saves_before_the_time_limit_and_the_job_comes_back(paced_server, tmp_path):
    """The local profile has Slurm send USR1 30 s before the limit: the worker saves and exits 75, the script
    requeues the job, and the next start resumes. Slurm checks limits about every 30 s and may send the signal up to
    60 s early: with a limit of 1 minute it came once 0.1 s after the requeued job started, before Python could
    take it, and the job failed (signal 10) instead of resuming. With 2 minutes the next start has 30 s at least:
    this takes 2-4 minutes."""
    body = request("signal", epochs=10_000, steps_per_epoch=200)
    body["resources"]["time_limit"] = "00:02:00"
    created = submit(paced_server, body)
    run_id = created["runs"][0]["id"]
    assert "#SBATCH --signal=USR1@30\n" in (tmp_path / "runs" / run_id / "job.sbatch").read_text()

    def resumed():
        return any(record["kind"] == "resume" for record in metrics_of(paced_server, run_id))

    wait_until("the run resumed after the signal", resumed, timeout_s=420, log=tmp_path / "server.log")
    records = metrics_of(paced_server, run_id)
    ends = [record for record in records if record["kind"] == "end"]
    assert ends[0]["status"] == "interrupted"
    assert "requeued" in [event["kind"] for event in events_of(paced_server, run_id)]
    httpx.post(f"{paced_server}/api/runs/{run_id}/cancel", timeout=30)
    assert read_to_the_end(paced_server, run_id)["state"] == "cancelled"


@pytest.mark.torch
def test_a_server_killed_mid_run_restarts_and_misses_no_metric(slurm, tmp_path):
    with running_server(tmp_path, "slurm") as url:
        created = submit(url, request("restart", epochs=3, steps_per_epoch=40))
        run_id = created["runs"][0]["id"]
        wait_until("the run started", lambda: metrics_of(url, run_id), log=tmp_path / "server.log")
        server_pid = int(re.findall(r"Started server process \[(\d+)\]", (tmp_path / "server.log").read_text())[-1])
        os.kill(server_pid, signal.SIGKILL)  # no shutdown of any kind: the database is as the kill left it
    with running_server(tmp_path, "slurm") as url:
        run = read_to_the_end(url, run_id)
        assert run["state"] == "completed"
        records = metrics_of(url, run_id)
        kinds = [r["kind"] for r in records if r["kind"] not in ("memory", "timing", "launch", "compute")]
        assert kinds == ["start", "epoch", "epoch", "epoch", "end"]
        assert epochs(records) == [1, 2, 3]


def unreachable(conf: Path) -> None:
    """The copy of slurm.conf now names a port where no slurmctld listens: Slurm's commands cannot reach it."""
    text = re.sub(r"(?m)^SlurmctldPort=.*\n", "", conf.read_text())
    conf.write_text(text + "SlurmctldPort=6999\n")


@pytest.mark.torch
def test_an_unreachable_controller_is_a_503_and_the_monitor_recovers(slurm, tmp_path):
    real = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    conf = tmp_path / "slurm.conf"
    conf.write_text(real.read_text())
    with running_server(tmp_path, "slurm", {"SLURM_CONF": str(conf)}) as url:
        live = submit(url, request("live through the outage", epochs=2, steps_per_epoch=30))["runs"][0]
        unreachable(conf)
        response = httpx.post(f"{url}/api/experiments", json=request("during the outage", epochs=1), timeout=120)
        assert response.status_code == 503, response.text
        assert "Unable to contact slurm controller" in response.json()["detail"]
        assert "resubmit them" in response.json()["detail"]
        refused = httpx.get(f"{url}/api/runs", params={"state": "submit_failed"}, timeout=10).json()["data"]
        assert len(refused) == 1
        wait_until("the monitor noticed", lambda: "cannot reach the scheduler" in (tmp_path / "server.log").read_text())
        assert run_of(url, live["id"])["state"] in {"submitted", "pending", "running"}  # not failed: unknown
        # What an operator's probes and Prometheus see meanwhile.
        assert httpx.get(f"{url}/readyz", timeout=60).status_code == 503
        assert "\nscalelab_scheduler_failures 0\n" not in httpx.get(f"{url}/metrics", timeout=60).text

        conf.write_text(real.read_text())  # Slurm is back
        assert read_to_the_end(url, live["id"])["state"] == "completed"
        assert "the scheduler answers again" in (tmp_path / "server.log").read_text()
        assert httpx.get(f"{url}/readyz", timeout=60).status_code == 200
        assert "\nscalelab_scheduler_failures 0\n" in httpx.get(f"{url}/metrics", timeout=60).text
        again = httpx.post(f"{url}/api/experiments/{refused[0]['experiment_id']}/resubmit", timeout=60)
        assert again.status_code == 200, again.text
        assert again.json()["data"][0]["attempt"] == 2
        assert read_to_the_end(url, refused[0]["id"])["state"] == "completed"


def test_runs_a_dead_server_left_unsubmitted_are_found_or_submitted(slurm, engine, session, tmp_path):
    experiment = experiment_row(session)
    runs = []
    for position in range(2):
        run = run_row(session, experiment, tmp_path / str(position), state=RunState.created, position=position)
        run_dir = tmp_path / str(position)
        run_dir.mkdir()
        script = run_dir / "job.sbatch"
        script.write_text(f"#!/bin/bash\n#SBATCH --job-name=scalelab-{run.id}\n#SBATCH --output={run_dir}/output.log\n")
        runs.append(run)
    # The first was submitted just before its server died, which never recorded the job id.
    sbatch = subprocess.run(["sbatch", "--parsable", f"--chdir={tmp_path}", str(tmp_path / "0" / "job.sbatch")],
                            capture_output=True, text=True, check=True)  # fmt: skip
    lost_job = sbatch.stdout.strip().split(";")[0]

    Monitor(engine, SlurmScheduler(), 1.0).cycle()
    with Session(engine) as check:
        found, resubmitted = (check.get(Run, run.id) for run in runs)
        assert found is not None and resubmitted is not None
        assert (found.job_id, found.attempt) == (lost_job, 1)
        assert resubmitted.job_id is not None and resubmitted.job_id != lost_job
        assert {found.state, resubmitted.state} <= {RunState.submitted, RunState.pending, RunState.running,
                                                   RunState.completed}  # fmt: skip


@pytest.mark.torch
def test_the_concurrency_limit_on_slurm(slurm_server):
    """Runs alike go as one Slurm array, which Slurm throttles (`%1`): the second task starts once the first ended."""
    body = request("one at a time", epochs=1, steps_per_epoch=5)
    body["grid"] = {"seed": [1, 2]}
    body["resources"]["max_concurrent"] = 1
    first, second = submit(slurm_server, body)["runs"]
    array = first["job_id"].split("_")[0]
    assert (first["job_id"], second["job_id"]) == (f"{array}_0", f"{array}_1")
    assert not second["waiting"]  # held by Slurm, not by scalelab
    done_first = read_to_the_end(slurm_server, first["id"])
    done_second = read_to_the_end(slurm_server, second["id"])
    assert done_first["state"] == done_second["state"] == "completed"
    times = subprocess.run(
        ["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={array}", "--format=JobID,Start,End"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    start_end = {row.split("|")[0]: row.split("|")[1:] for row in times.splitlines() if row}
    assert start_end[second["job_id"]][0] >= start_end[first["job_id"]][1]  # ISO times of one clock: they sort
