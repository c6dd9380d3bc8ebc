"""Job arrays through the API, with Slurm's commands answered at the subprocess boundary: which runs one sbatch
submits, the job ids their runs get, cancelling and resubmitting one, the preview, and where arrays are not used.
The same on the real two-node cluster is tests/e2e/test_arrays_e2e.py."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from sqlmodel import Session

from contract.states import RunState
from server.config import Settings
from server.models import Run
from server.scheduler.slurm import SlurmScheduler
from tests.conftest import make_client
from tests.factories import experiment_request

ARRAY_ID = "900"


class FakeSlurm:
    """sbatch answers an id (arrays and jobs of their own alike), scancel agrees; every call is kept."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.next_id = int(ARRAY_ID)

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if argv[0] == "sbatch":
            self.next_id += 1
            return subprocess.CompletedProcess(argv, 0, f"{self.next_id - 1}\n", "")
        return subprocess.CompletedProcess(argv, 0, "", "")

    def sbatches(self) -> list[list[str]]:
        return [call for call in self.calls if call[0] == "sbatch"]


def repeats(count: int, **resources: object) -> dict[str, object]:
    return experiment_request(
        grid={"gpus": [1]}, repeats=count, resources={"nodes": 1, "time_limit": "00:10:00", **resources}
    )


def test_repeats_go_as_one_array_each_run_its_task(settings):
    slurm = FakeSlurm()
    with make_client(settings, SlurmScheduler(run=slurm)) as client:
        response = client.post("/api/experiments", json=repeats(5))
        assert response.status_code == 201, response.text
        runs = response.json()["runs"]
    assert len(slurm.sbatches()) == 1
    [sbatch] = slurm.sbatches()
    assert sbatch[2] == f"--chdir={settings.runs_dir}"
    script = Path(sbatch[3]).read_text()
    assert "#SBATCH --array=0-4\n" in script
    assert [run["job_id"] for run in runs] == [f"{ARRAY_ID}_{task}" for task in range(5)]
    assert {run["state"] for run in runs} == {"submitted"}
    for task, run in enumerate(runs):
        assert f"    {task}) run_id={run['id']}; run_dir={settings.runs_dir / run['id']} ;;\n" in script


def test_a_concurrency_limit_throttles_the_array_and_holds_no_run_back(settings):
    slurm = FakeSlurm()
    with make_client(settings, SlurmScheduler(run=slurm)) as client:
        runs = client.post("/api/experiments", json=repeats(6, max_concurrent=2)).json()["runs"]
    [sbatch] = slurm.sbatches()
    assert "#SBATCH --array=0-5%2\n" in Path(sbatch[3]).read_text()
    assert [run["waiting"] for run in runs] == [False] * 6


def test_cancel_and_resubmit_touch_one_task_alone(settings, engine):
    slurm = FakeSlurm()
    with make_client(settings, SlurmScheduler(run=slurm)) as client:
        runs = client.post("/api/experiments", json=repeats(4)).json()["runs"]
        assert client.post(f"/api/runs/{runs[2]['id']}/cancel").status_code == 202
        assert [call for call in slurm.calls if call[0] == "scancel"] == [["scancel", f"{ARRAY_ID}_2"]]
        # As the monitor records it once Slurm says the task is cancelled.
        with Session(engine) as session:
            run = session.get(Run, runs[2]["id"])
            assert run is not None
            run.state = RunState.cancelled
            session.add(run)
            session.commit()
        response = client.post(f"/api/runs/{runs[2]['id']}/resubmit")
        assert response.status_code == 200, response.text
        assert response.json()["job_id"] == str(int(ARRAY_ID) + 1)  # a job of its own
    run_dir = settings.runs_dir / runs[2]["id"]
    assert slurm.sbatches()[-1][2:] == [f"--chdir={run_dir}", str(run_dir / "job.sbatch")]


def test_the_setting_off_submits_one_job_per_run(settings):
    slurm = FakeSlurm()
    off = Settings(**{**settings.model_dump(), "job_arrays": False})
    with make_client(off, SlurmScheduler(run=slurm)) as client:
        runs = client.post("/api/experiments", json=repeats(3)).json()["runs"]
        preview = client.post("/api/experiments/preview", json=repeats(3)).json()
    assert len(slurm.sbatches()) == 3
    assert all("_" not in run["job_id"] for run in runs)
    assert preview["array_script"] is None and "SCALELAB_JOB_ARRAYS is off" in preview["array_note"]


def test_runs_of_different_resources_go_as_an_array_each(settings):
    slurm = FakeSlurm()
    request = experiment_request(grid={"gpus": [1, 2]}, repeats=2)
    with make_client(settings, SlurmScheduler(run=slurm)) as client:
        runs = client.post("/api/experiments", json=request).json()["runs"]
    assert len(slurm.sbatches()) == 2
    assert sorted(run["job_id"] for run in runs) == ["900_0", "900_1", "901_0", "901_1"]


def test_the_preview_shows_the_array_script(settings):
    with make_client(settings, SlurmScheduler(run=FakeSlurm())) as client:
        preview = client.post("/api/experiments/preview?index=1", json=repeats(3, max_concurrent=2)).json()
    assert preview["array_note"] is None
    script = preview["array_script"]
    assert "#SBATCH --array=0-2%2\n" in script
    assert f"    1) run_id=RUN_ID_1; run_dir={settings.runs_dir}/RUN_ID_1 ;;\n" in script


def test_without_slurms_commands_one_job_per_run_and_the_preview_says_why(client):
    preview = client.post("/api/experiments/preview", json=repeats(3)).json()
    assert preview["array_script"] is None
    assert preview["array_note"] == "the local scheduler submits one job per run"


def unreachable(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    said = "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"
    return subprocess.CompletedProcess(argv, 1, "", said)


def test_an_unreachable_controller_keeps_every_run_of_the_array_to_resubmit(settings):
    with make_client(settings, SlurmScheduler(run=unreachable)) as client:
        response = client.post("/api/experiments", json=repeats(10))
        assert response.status_code == 503, response.text
        assert "10 of its 10 runs are kept as submit_failed" in response.json()["detail"]
        runs = client.get("/api/runs").json()["data"]
    assert {run["state"] for run in runs} == {"submit_failed"}
    assert {run["attempt"] for run in runs} == {1}  # the array was tried: every run in it
    assert all("Slurm cannot be reached" in run["message"] for run in runs)
