"""Failure kinds on the real local Slurm, through the API: a program that cannot import stops its series' larger runs
with on_failure stop_series and not with continue (where they run and fail the same way); two gloo processes, one
never joining an all_reduce, end in a collective timeout; torch refusing a tensor larger than the host ends out of
memory; on the two-node cluster, which enforces memory through the memory cgroup, a job over its --mem ends
out_of_memory. Each with its sentence, in the run's detail and the experiment's summary.

Every experiment is submitted at once by one module fixture: different experiments run side by side.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benches.server_process import running_server
from contract.states import FailureKind, RunState
from server.runstate import FAILED_STATES
from server.scheduler import Job
from server.scheduler.slurm import SlurmScheduler
from server.services import failed_runs
from server.services.failure_kinds import ADVICE
from tests.e2e.conftest import slurm2_server_in
from tests.e2e.runs import output_of, wait_until_ended
from tests.e2e.test_lifecycle import events_of, submit
from tests.factories import batch_script, experiment_row, run_row, spec, wait_final

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

BROKEN = "import no_such_module\n"
# Rank 1 never reaches the all_reduce in time: rank 0's gloo gives up after 3 s.
GLOO = """
import datetime, os, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
if dist.get_rank() == 1:
    time.sleep(20)
dist.all_reduce(torch.ones(1))
"""
# A gibibyte written, in a job allowed 200 MiB: the memory cgroup's OOM killer ends it.
OVER_MEM = """
data = b"x" * 2**30
"""
# A petabyte: torch's host allocator refuses it at once.
HOG = """
import torch
torch.empty(2**50, dtype=torch.uint8)
"""


def program_request(name: str, workdir: Path, script: str, **request: Any) -> dict[str, Any]:
    return {
        "name": name,
        "base": {"kind": "program", "strategy": "ddp", "gpus": 1,
                 "program": {"command": ["python", script], "workdir": str(workdir)}},
        "resources": {"nodes": 1, "time_limit": "00:10:00"},
        **request,
    }  # fmt: skip


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("failure-kinds-e2e")


@pytest.fixture(scope="module")
def programs(work: Path) -> Path:
    folder = work / "project"
    folder.mkdir()
    for name, text in {"broken.py": BROKEN, "gloo.py": GLOO, "hog.py": HOG, "over_mem.py": OVER_MEM}.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder


@pytest.fixture(scope="module")
def server(slurm: None, work: Path, programs: Path) -> Iterator[str]:
    env = {"SCALELAB_POLL_INTERVAL_S": "1", "SCALELAB_PROGRAM_ROOTS": str(programs)}
    with running_server(work, "slurm", env) as url:
        yield url


@pytest.fixture(scope="module")
def experiments(server: str, programs: Path) -> dict[str, dict[str, Any]]:
    # Exclusive runs take turns on the local profile: the 2- and 4-process runs wait in scalelab meanwhile.
    grid = {"grid": {"gpus": [1, 2, 4]}, "isolation": "exclusive"}
    requests = {
        "stop": program_request("import error, stop_series", programs, "broken.py", on_failure="stop_series", **grid),
        "continue": program_request("import error, continue", programs, "broken.py", on_failure="continue", **grid),
        "gloo": program_request("gloo timeout", programs, "gloo.py", isolation="shared"),
        "hog": program_request("host memory", programs, "hog.py", isolation="shared"),
    }
    requests["gloo"]["base"]["gpus"] = 2
    return {name: submit(server, request) for name, request in requests.items()}


def _ended(server: str, work: Path, experiment: dict[str, Any]) -> list[dict[str, Any]]:
    return [_classified(server, wait_until_ended(server, run["id"], work / "server.log")) for run in experiment["runs"]]


def _classified(server: str, run: dict[str, Any], timeout_s: float = 60) -> dict[str, Any]:
    """The run once a failed one has its kind: the monitor classifies a failed run in the step after the one that
    read its output to the end, and a test that read it in between saw no kind."""
    deadline = time.monotonic() + timeout_s
    while run["state"] in FAILED_STATES and run["failure_kind"] is None and time.monotonic() < deadline:
        time.sleep(1)
        run = httpx.get(f"{server}/api/runs/{run['id']}", timeout=10).json()
    return run


def _summary(server: str, experiment: dict[str, Any]) -> dict[str, Any]:
    response = httpx.get(f"{server}/api/experiments/{experiment['id']}/failures", timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_an_import_error_stops_the_larger_runs_of_its_series(server, work, experiments):
    first, *larger = _ended(server, work, experiments["stop"])
    assert first["state"] == "failed"
    assert first["failure_kind"] == "import_error"
    assert "no_such_module" in first["failure_detail"]
    assert first["failure_detail"].endswith(ADVICE[FailureKind.import_error])
    for run in larger:
        # Never submitted: no job, no start, and the run says why.
        assert (run["state"], run["job_id"], run["started_at"]) == ("cancelled", None, None)
        assert run["failure_kind"] is None
        assert f"run {first['id']}" in run["message"] and "on_failure stop_series" in run["message"]
        said = events_of(server, run["id"])
        assert [event["kind"] for event in said] == ["cancel_requested"]
    summary = _summary(server, experiments["stop"])
    assert (summary["failed"], summary["unclassified"]) == (1, 0)
    assert [group["summary"] for group in summary["kinds"]] == ["1 of 3 import error: 1 GPU"]


def test_with_continue_the_larger_runs_run_and_fail_the_same_way(server, work, experiments):
    runs = _ended(server, work, experiments["continue"])
    assert [(run["state"], run["failure_kind"]) for run in runs] == [("failed", "import_error")] * 3
    assert all(run["job_id"] for run in runs)
    summary = _summary(server, experiments["continue"])
    assert [group["summary"] for group in summary["kinds"]] == ["3 of 3 import error: 1 GPU; 2 GPUs; 4 GPUs"]
    assert summary["kinds"][0]["advice"] == ADVICE[FailureKind.import_error]


def test_a_rank_that_never_joins_an_all_reduce_is_a_collective_timeout(server, work, experiments):
    (run,) = _ended(server, work, experiments["gloo"])
    assert run["state"] == "failed"
    assert run["failure_kind"] == "collective_timeout", run["failure_detail"]
    assert "Timed out waiting 3000ms" in run["failure_detail"]
    assert run["failure_detail"].endswith(ADVICE[FailureKind.collective_timeout])


def test_a_tensor_larger_than_the_host_is_out_of_memory(server, work, experiments):
    (run,) = _ended(server, work, experiments["hog"])
    assert run["state"] == "failed"
    assert run["failure_kind"] == "out_of_memory", run["failure_detail"]
    assert "can't allocate memory" in run["failure_detail"]
    assert run["failure_detail"].endswith(ADVICE[FailureKind.out_of_memory])


def test_a_job_over_its_mem_is_out_of_memory(slurm2_env, tmp_path, programs):
    if "task/cgroup" not in subprocess.run(["scontrol", "show", "config"], env=slurm2_env, capture_output=True,
                                           text=True, check=True).stdout:  # fmt: skip
        pytest.skip("the two-node cluster does not enforce memory (no cgroup v1 memory controller): see slurm-local")
    env = {"SCALELAB_POLL_INTERVAL_S": "1", "SCALELAB_PROGRAM_ROOTS": str(programs)}
    with slurm2_server_in(tmp_path, slurm2_env, **env) as server:
        request = program_request("over its --mem", programs, "over_mem.py")
        request["resources"]["sbatch_options"] = {"mem": "200M"}
        (run,) = _ended(server, tmp_path, submit(server, request))
        # srun's step was killed by the memory cgroup (sacct: step OUT_OF_MEMORY); the batch script then exits 1, so
        # Slurm's job state is FAILED and the kind comes from srun's and slurmstepd's words.
        assert (run["state"], run["scheduler_state"]) == ("failed", "FAILED")
        assert run["failure_kind"] == "out_of_memory", run["failure_detail"]
        # srun ("task 0: Out Of Memory") and the step's slurmstepd ("Detected 1 oom-kill event(s)") write to the job's
        # output from two processes, in either order: the detail quotes whichever came first.
        assert re.search(r"task 0: Out Of Memory|Detected \d+ oom-kill event", run["failure_detail"])
        assert run["failure_detail"].endswith(ADVICE[FailureKind.out_of_memory])
        assert "oom-kill" in output_of(server, run["id"])
        summary = _summary(server, {"id": run["experiment_id"]})
        assert [group["kind"] for group in summary["kinds"]] == ["out_of_memory"]


def test_a_run_of_the_series_pending_in_slurm_is_cancelled_there(slurm, session, tmp_path):
    """A larger run already in Slurm's queue (held there, so that it cannot start) is cancelled through Slurm,
    saying why; the run of another series stays queued."""
    experiment = experiment_row(session, request={"name": "pending", "on_failure": "stop_series"})
    failed = run_row(
        session,
        experiment,
        tmp_path / "failed",
        run_spec=spec(strategy="ddp", gpus=1),
        state=RunState.failed,
        failure_kind=FailureKind.import_error,
    )
    scheduler = SlurmScheduler()
    queued = {}
    for position, strategy in ((1, "ddp"), (2, "fsdp")):
        script = batch_script(tmp_path, "#SBATCH --hold\nsleep 300", name=f"pending-{position}")
        job = scheduler.submit(script, tmp_path)
        queued[strategy] = run_row(
            session,
            experiment,
            tmp_path / strategy,
            run_spec=spec(strategy=strategy, gpus=2),
            state=RunState.pending,
            position=position,
            job_id=job,
        )
    try:
        stopped = failed_runs.stop_after(session, failed, scheduler)
        assert [run.id for run in stopped] == [queued["ddp"].id]
        (status,) = wait_final(scheduler, [queued["ddp"].job_id or ""]).values()
        assert status.state is RunState.cancelled
        session.refresh(queued["ddp"])
        assert f"run {failed.id}" in (queued["ddp"].message or "")
        other = scheduler.poll([Job(queued["fsdp"].job_id or "")])
        assert [found.state for found in other.values()] == [RunState.pending]
    finally:
        scheduler.cancel(queued["fsdp"].job_id or "")
