"""An inference experiment naming a training run that has not ended, through the API on a Slurm scheduler whose
commands are stand-ins (the subprocess boundary): the dependency in the preview and the scripts, the runs' words
while they wait, the 422s, and resubmitting a run that waited."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from contract.rundir import SCRIPT_FILE
from contract.states import FailureKind, RunState
from server.config import Settings
from server.models import Run
from server.scheduler.slurm import SlurmScheduler
from server.services import users
from tests.conftest import bearer, make_client
from tests.factories import experiment_row, run_row, spec
from tests.server.api.test_experiments import error_locs
from tests.server.api.test_inference import inference_request

TRAINING = {"model": "gpt", "dataset": "text", "context": 32, "checkpoint_every": 1, "epochs": 2}
CHECKPOINT_RUN = ("body", "inference", "checkpoint_run")


class FakeSlurm:
    """Slurm's commands as the scheduler runs them: sbatch gives the next job id, the rest answer nothing."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        out = f"{9000 + len(self.calls)}\n" if argv[0] == "sbatch" else ""
        return subprocess.CompletedProcess(list(argv), 0, out, "")

    def named(self, command: str) -> list[list[str]]:
        return [call for call in self.calls if call[0] == command]


@pytest.fixture
def slurm() -> FakeSlurm:
    return FakeSlurm()


@pytest.fixture
def slurm_client(settings: Settings, slurm: FakeSlurm) -> Iterator[TestClient]:
    with make_client(settings, SlurmScheduler(slurm)) as client:
        yield client


def training_row(session: Session, run_dir: Path, **overrides: Any) -> Run:
    """A gpt training run on text that is running under job 4242, with checkpoints on: nothing saved yet."""
    fields = {**TRAINING, **overrides.pop("spec", {})}
    run_dir.mkdir(parents=True, exist_ok=True)
    values = {"state": RunState.running, "job_id": "4242", **overrides}
    return run_row(session, experiment_row(session, "training"), run_dir, run_spec=spec(**fields), **values)


def one_run(request: dict[str, Any]) -> dict[str, Any]:
    request["grid"] = {"compile": [False]}
    return request


def test_the_preview_shows_the_dependency_line(slurm_client, session, tmp_path):
    training = training_row(session, tmp_path / "training")
    response = slurm_client.post(
        "/api/experiments/preview", json=one_run(inference_request({"checkpoint_run": training.id}))
    )
    assert response.status_code == 200, response.text
    script = response.json()["script"]
    assert "#SBATCH --dependency=afterok:4242\n#SBATCH --kill-on-invalid-dep=yes\n" in script
    assert response.json()["runs"][0]["checkpoint"] == str(tmp_path / "training")


def test_a_dependent_experiment_is_submitted_at_once_and_says_what_it_waits_for(slurm_client, slurm, session, tmp_path):
    training = training_row(session, tmp_path / "training")
    response = slurm_client.post("/api/experiments", json=one_run(inference_request({"checkpoint_run": training.id})))
    assert response.status_code == 201, response.text
    (run,) = response.json()["runs"]
    assert (run["state"], run["after_run"], run["after_job"]) == ("submitted", training.id, "4242")
    assert run["waiting_for"] == f"waiting for training run {training.id} to end"
    (sbatch,) = slurm.named("sbatch")
    assert "#SBATCH --dependency=afterok:4242\n" in Path(sbatch[-1]).read_text()
    assert Path(sbatch[-1]) == Path(run["run_dir"]) / SCRIPT_FILE
    # Pending in Slurm for its dependency: the same words; once Slurm gives another reason, Slurm's.
    stored = session.get(Run, run["id"])
    assert stored is not None
    stored.state, stored.scheduler_reason = RunState.pending, "Dependency"
    session.add(stored)
    session.commit()
    shown = slurm_client.get(f"/api/runs/{run['id']}").json()
    assert shown["waiting_for"] == f"waiting for training run {training.id} to end"
    page = slurm_client.get("/runs").text
    assert f"waiting for training run {training.id} to end" in page
    stored.scheduler_reason = "Resources"
    session.add(stored)
    session.commit()
    assert slurm_client.get(f"/api/runs/{run['id']}").json()["waiting_for"] is None


def test_a_completed_training_run_is_generated_from_without_a_dependency(slurm_client, session, tmp_path):
    from tests.server.api.test_inference import trained_row

    trained = trained_row(session, tmp_path / "trained")
    trained.job_id = "4242"
    session.add(trained)
    session.commit()
    response = slurm_client.post("/api/experiments", json=one_run(inference_request({"checkpoint_run": trained.id})))
    assert response.status_code == 201, response.text
    (run,) = response.json()["runs"]
    assert (run["after_run"], run["waiting_for"]) == (None, None)
    assert "--dependency" not in (Path(run["run_dir"]) / SCRIPT_FILE).read_text()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"spec": {"checkpoint_every": 0}}, "will save no checkpoint (checkpoint_every 0, 2 epochs)"),
        ({"spec": {"checkpoint_every": 3}}, "will save no checkpoint (checkpoint_every 3, 2 epochs)"),
        ({"spec": {"model": "mlp", "dataset": "synthetic", "context": None}}, "is not a gpt trained on text"),
        ({"state": RunState.created, "job_id": None, "waiting": True, "message": "waiting for a slot"},
         "has no job to wait for yet (it is created: waiting for a slot)"),
        ({"job_id": "4242;rm"}, "is not one Slurm's --dependency takes"),
        ({"state": RunState.out_of_memory}, "has not completed (it is out_of_memory)"),
    ],
)  # fmt: skip
def test_a_training_run_that_cannot_be_waited_for_is_refused_at_its_field(
    slurm_client, session, tmp_path, overrides, message
):
    training = training_row(session, tmp_path / "training", **overrides)
    for path in ("/api/experiments/preview", "/api/experiments"):
        response = slurm_client.post(path, json=one_run(inference_request({"checkpoint_run": training.id})))
        assert error_locs(response) == [CHECKPOINT_RUN], response.text
        assert message in response.json()["detail"][0]["msg"], response.text


def test_an_inference_run_is_not_a_training_run_to_wait_for(slurm_client, session, tmp_path):
    running = training_row(session, tmp_path / "inference", spec={"kind": "inference", "checkpoint": "/x"})
    response = slurm_client.post(
        "/api/experiments/preview", json=one_run(inference_request({"checkpoint_run": running.id}))
    )
    assert error_locs(response) == [CHECKPOINT_RUN]
    assert "is not a gpt trained on text (it is inference" in response.text


def test_a_run_that_does_not_exist_or_is_anothers_private_one_is_none(slurm_client, session, tmp_path):
    response = slurm_client.post(
        "/api/experiments/preview", json=one_run(inference_request({"checkpoint_run": "0123456789"}))
    )
    assert error_locs(response) == [CHECKPOINT_RUN]
    assert "there is no run '0123456789'" in response.text
    training = training_row(session, tmp_path / "training")  # the admin's, private
    token = users.add_user(session, "bob")
    request = one_run(inference_request({"checkpoint_run": training.id}))
    response = slurm_client.post("/api/experiments/preview", json=request, headers=bearer(token))
    assert error_locs(response) == [CHECKPOINT_RUN]
    assert f"there is no run '{training.id}'" in response.text


def test_the_local_scheduler_says_plainly_that_it_cannot_wait(client, session, tmp_path):
    training = training_row(session, tmp_path / "training", scheduler="local")
    response = client.post("/api/experiments/preview", json=one_run(inference_request({"checkpoint_run": training.id})))
    assert error_locs(response) == [CHECKPOINT_RUN]
    message = response.json()["detail"][0]["msg"]
    assert (
        "the local scheduler cannot make a job wait for another: submit this inference once it has completed" in message
    )


def _dependent(session: Session, slurm_client: TestClient, training: Run) -> Run:
    response = slurm_client.post("/api/experiments", json=one_run(inference_request({"checkpoint_run": training.id})))
    assert response.status_code == 201, response.text
    run = session.get(Run, response.json()["runs"][0]["id"])
    assert run is not None
    return run


def _ended(session: Session, run: Run, state: RunState, **values: Any) -> None:
    session.refresh(run)
    run.state = state
    for name, value in values.items():
        setattr(run, name, value)
    session.add(run)
    session.commit()


def test_resubmitting_a_dependent_run_follows_its_training(slurm_client, slurm, session, tmp_path):
    training = training_row(session, tmp_path / "training")
    dependent = _dependent(session, slurm_client, training)
    _ended(session, dependent, RunState.cancelled, scheduler_reason="Dependency")
    # The training failed: nothing to infer from, whatever is resubmitted.
    _ended(session, training, RunState.failed, failure_kind=FailureKind.program_error)
    response = slurm_client.post(f"/api/runs/{dependent.id}/resubmit")
    assert response.status_code == 409, response.text
    assert f"training run {training.id} failed (program error): nothing to infer from" in response.text
    # Submitted again, under another job: the script still waits for the old one.
    _ended(session, training, RunState.running, job_id="4343")
    response = slurm_client.post(f"/api/runs/{dependent.id}/resubmit")
    assert response.status_code == 409, response.text
    assert "waits for job 4242" in response.text and "(job 4343); clone this experiment" in response.text
    # Completed: the job runs at once (Slurm counts a dependency on a job it has forgotten as met).
    _ended(session, training, RunState.completed)
    submitted = len(slurm.named("sbatch"))
    response = slurm_client.post(f"/api/runs/{dependent.id}/resubmit")
    assert response.status_code == 200, response.text
    assert len(slurm.named("sbatch")) == submitted + 1
