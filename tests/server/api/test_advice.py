"""No confident advice from flagged points, through the app: a baseline that shared its node with another job (as
Slurm's accounting says) withholds the recommendation in the scaling answers and the report, where the same series
without the other job is advised."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from server.config import Settings
from server.models import Experiment, RunAccounting
from server.scheduler.local import LocalScheduler
from tests.conftest import make_client
from tests.factories import experiment_row
from tests.server.api.test_programs import EXAMPLE_PROFILES, with_program
from tests.server.services.comparison.timed import timed_run

# Seconds per timed epoch at each GPU count: a series that scales well, which alone is advised.
TIMES = {1: 8.0, 2: 4.1, 4: 2.2, 8: 1.3}


def series(session: Session, experiment: Experiment, where: Path, shared: bool) -> None:
    """The series' runs; with `shared`, Slurm saw another job on the baseline's node while it ran."""
    for gpus, seconds in TIMES.items():
        run = timed_run(session, experiment, where / str(gpus), gpus, [seconds * 2] + [seconds] * 3)
        if gpus == 1 and shared:
            session.add(RunAccounting(run_id=run.id, job_id="7", elapsed_s=40, shared_with=["4242"]))
    session.commit()


def analysis(client: TestClient, experiment: Experiment) -> dict[str, Any]:
    response = client.get(f"/api/experiments/{experiment.id}/scaling")
    assert response.status_code == 200, response.text
    (only,) = response.json()["series"]
    assert isinstance(only, dict)
    return only


def test_a_flagged_baseline_withholds_the_recommendation(client: TestClient, session: Session, tmp_path: Path):
    clean, flagged = experiment_row(session, "clean"), experiment_row(session, "flagged")
    series(session, clean, tmp_path / "clean", shared=False)
    series(session, flagged, tmp_path / "flagged", shared=True)

    advised = analysis(client, clean)
    assert advised["advice"] == "given"
    assert advised["recommendation"].startswith("Efficiency stays at or above 80 %")

    withheld = analysis(client, flagged)
    assert withheld["advice"] == "withheld"
    assert withheld["recommendation"].startswith(
        "No recommendation: the baseline, the point at 1 GPU (shared_node), carries warnings"
    )
    assert "Efficiency stays" not in withheld["recommendation"]
    # The figures are not hidden: the fits and points are there, marked.
    assert withheld["fits"]["amdahl"]["describes_points"] is True and withheld["fits"]["r2_bound"] == 0.9
    assert [point["gpus"] for point in withheld["points"]] == [1, 2, 4, 8]

    # The selection's answer and the report say the same.
    selected = client.get("/api/scaling", params={"experiment_id": flagged.id}).json()["series"][0]
    assert selected["recommendation"] == withheld["recommendation"]
    report = client.get(f"/api/experiments/{flagged.id}/report.html").text
    assert '<p class="recommendation advice-withheld">No recommendation: the baseline' in report


# ---- a program's declared batch, through the request ---------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A program root holding a project directory."""
    (tmp_path / "programs" / "proj").mkdir(parents=True)
    return tmp_path / "programs"


@pytest.fixture
def program_client(settings: Settings, local_scheduler: LocalScheduler, root: Path) -> Iterator[TestClient]:
    program_settings = settings.model_copy(update={"program_roots": [root], "profiles_dir": EXAMPLE_PROFILES})
    with make_client(program_settings, local_scheduler) as client:
        yield client


def test_a_programs_batch_may_name_a_swept_parameter_and_a_missing_one_is_refused(
    program_client: TestClient, root: Path
):
    request = with_program(root, params={}, batch={"per": "process", "param": "batch_size"})
    request["grid"] = {"gpus": [1, 2], "params.batch_size": [16, 32]}
    response = program_client.post("/api/experiments/preview", json=request)
    assert response.status_code == 200, response.text
    assert {run["program"]["batch"]["param"] for run in response.json()["runs"]} == {"batch_size"}

    # Without the parameter, no run of the grid has a batch to read: each is refused, naming the field.
    request["grid"] = {"gpus": [1, 2]}
    response = program_client.post("/api/experiments", json=request)
    assert response.status_code == 422, response.text
    messages = [error["msg"] for error in response.json()["detail"]]
    assert messages == [
        f"gpus={gpus}: program.batch.param names 'batch_size', which is not among the program's params"
        for gpus in (1, 2)
    ]
