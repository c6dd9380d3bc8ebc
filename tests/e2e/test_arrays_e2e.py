"""Job arrays on the real two-node Slurm: 16 runs of a program (seeds 0 to 15, seconds each) go to Slurm with ONE
sbatch, counted by a wrapper in front of the real one on the server's PATH; each task is followed to its end as a
run of its own; one is cancelled alone (the others complete), one is requeued by Slurm and completes, and the
cancelled one, resubmitted, runs again as a job of its own."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import slurm2_server_in
from tests.e2e.runs import output_of, wait_until_ended
from tests.e2e.test_lifecycle import events_of, run_of, submit

pytestmark = [pytest.mark.slurm]

RUNS = 16
CANCELLED, REQUEUED = 3, 4  # by seed, which is the run's position
# Seconds each task runs: the cancelled one long enough to be cancelled while it runs (as a task of the array; run
# again as a job of its own, briefly), the requeued one long enough on its first start to be requeued.
PROGRAM = f"""
    import os, time
    seed = int(os.environ["SCALELAB_SEED"])
    in_array = "SLURM_ARRAY_JOB_ID" in os.environ
    restarted = int(os.environ.get("SLURM_RESTART_COUNT", "0")) > 0
    print(f"seed {{seed}} task {{os.environ.get('SLURM_ARRAY_TASK_ID')}} restart {{restarted}}", flush=True)
    if seed == {CANCELLED} and in_array:
        time.sleep(600)
    elif seed == {REQUEUED} and not restarted:
        time.sleep(600)
    else:
        time.sleep(1)
"""
# In front of the real sbatch: notes each call, then runs it.
SBATCH_WRAPPER = """#!/bin/bash
echo "$*" >> {log}
exec {real} "$@"
"""


def request(programs: Path) -> dict[str, Any]:
    return {
        "name": "array e2e",
        "base": {"kind": "program", "strategy": "ddp", "gpus": 1,
                 "program": {"command": ["python", "tick.py"], "workdir": str(programs)}},
        "grid": {"seed": list(range(RUNS))},
        "isolation": "shared",
        "on_failure": "continue",
        "resources": {"nodes": 1, "time_limit": "00:10:00", "max_concurrent": 8},
    }  # fmt: skip


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("arrays-e2e")


@pytest.fixture(scope="module")
def server(slurm2_env: dict[str, str], work: Path) -> Iterator[str]:
    programs = work / "project"
    programs.mkdir()
    (programs / "tick.py").write_text(textwrap.dedent(PROGRAM))
    wrapped = work / "bin"
    wrapped.mkdir()
    real = shutil.which("sbatch", path=slurm2_env["PATH"])
    assert real is not None
    (wrapped / "sbatch").write_text(SBATCH_WRAPPER.format(log=work / "sbatch.calls", real=real))
    (wrapped / "sbatch").chmod(0o755)
    env = {"SCALELAB_PROGRAM_ROOTS": str(programs), "PATH": f"{wrapped}:{slurm2_env['PATH']}"}
    with slurm2_server_in(work, slurm2_env, **env) as url:
        yield url


def sbatch_calls(work: Path) -> list[str]:
    calls = work / "sbatch.calls"
    return calls.read_text().splitlines() if calls.exists() else []


def wait_for(what: str, check: Any, log: Path, timeout_s: float = 300) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"{what} did not happen within {timeout_s} s\n{log.read_text()[-3000:]}")


def test_sixteen_runs_one_sbatch_one_cancelled_one_requeued(server: str, work: Path, slurm2_env: dict[str, str]):
    preview = httpx.post(f"{server}/api/experiments/preview", json=request(work / "project"), timeout=60).json()
    assert "#SBATCH --array=0-15%8\n" in preview["array_script"], preview

    experiment = submit(server, request(work / "project"))
    runs = experiment["runs"]
    assert len(runs) == RUNS
    assert len(sbatch_calls(work)) == 1, sbatch_calls(work)
    array_id = runs[0]["job_id"].split("_")[0]
    assert [run["job_id"] for run in runs] == [f"{array_id}_{task}" for task in range(RUNS)]
    log = work / "server.log"

    cancelled, requeued = runs[CANCELLED]["id"], runs[REQUEUED]["id"]
    wait_for("the task to cancel running", lambda: run_of(server, cancelled)["state"] == "running", log, 900)
    assert httpx.post(f"{server}/api/runs/{cancelled}/cancel", timeout=30).status_code == 202
    wait_for("the task to requeue running", lambda: run_of(server, requeued)["state"] == "running", log, 900)
    requeue = subprocess.run(
        ["scontrol", "requeue", f"{array_id}_{REQUEUED}"], env=slurm2_env, capture_output=True, text=True
    )
    assert requeue.returncode == 0, requeue.stderr

    ended = {run["id"]: wait_until_ended(server, run["id"], log, timeout_s=600) for run in runs}
    states = {position: ended[run["id"]]["state"] for position, run in enumerate(runs)}
    assert states == {position: "cancelled" if position == CANCELLED else "completed" for position in range(RUNS)}
    for position, run in enumerate(runs):
        # Each task's output went to its own run, and no other's.
        assert f"seed {position} task {position} " in output_of(server, run["id"]), position
    assert "requeued" in [event["kind"] for event in events_of(server, requeued)]
    assert "seed 4 task 4 restart True" in output_of(server, requeued)
    assert len(sbatch_calls(work)) == 1  # nothing was submitted again along the way

    # The cancelled run, resubmitted alone, runs as a job of its own.
    again = httpx.post(f"{server}/api/runs/{cancelled}/resubmit", timeout=60)
    assert again.status_code == 200, again.text
    assert "_" not in again.json()["job_id"]
    assert wait_until_ended(server, cancelled, log, timeout_s=300)["state"] == "completed"
    assert len(sbatch_calls(work)) == 2
