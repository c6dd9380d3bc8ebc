"""Run again: a new run of the same spec on the image digest the run recorded; shown on the run page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from contract.rundir import SCRIPT_FILE
from contract.states import RunState
from server.config import Settings
from server.models import Experiment, Run
from server.scheduler.slurm import SlurmScheduler
from tests.conftest import make_client
from tests.factories import experiment_request, experiment_row, run_row

EXAMPLE_PROFILES = Path(__file__).resolve().parents[3] / "examples" / "profiles"
DIGEST = "sha256:" + "0123456789abcdef" * 4
IMAGE = "localhost/scalelab-worker:latest"


@pytest.fixture
def profiled_settings(settings: Settings) -> Settings:
    """The example profiles beside the built-in one: `podman` runs each task in the worker image."""
    return settings.model_copy(update={"profiles_dir": EXAMPLE_PROFILES})


def finished_run(session: Session, run_dir: Path, profile: str, **provenance: Any) -> Run:
    experiment = experiment_row(session)
    experiment.request = experiment_request(resources={"profile": profile, "time_limit": "00:10:00"})
    session.add(experiment)
    session.commit()
    return run_row(session, experiment, run_dir, state=RunState.completed, profile=profile, **provenance)


def test_a_run_without_a_recorded_digest_cannot_run_again(client, session, tmp_path):
    run = finished_run(session, tmp_path / "r", "local", image=IMAGE)
    response = client.post(f"/api/runs/{run.id}/rerun")
    assert response.status_code == 409
    assert "did not record the digest of an image it ran in" in response.json()["detail"]


def test_a_profile_that_runs_no_image_cannot_pin_one(client, session, tmp_path):
    run = finished_run(session, tmp_path / "r", "local", image=IMAGE, image_digest=DIGEST)
    response = client.post(f"/api/runs/{run.id}/rerun")
    assert response.status_code == 409
    assert "runtime none, whose image the batch script does not name" in response.json()["detail"]
    assert client.get(f"/api/runs?experiment_id={run.experiment_id}").json()["count"] == 1


def test_the_run_page_shows_the_provenance_and_offers_to_run_again(profiled_settings, session, tmp_path):
    pinned = finished_run(
        session,
        tmp_path / "a",
        "podman",
        image=IMAGE,
        image_digest=DIGEST,
        worker_version="0.1.0",
        source_revision="c0ffee",
    )
    unknown = finished_run(session, tmp_path / "b", "podman")
    with make_client(profiled_settings, SlurmScheduler()) as client:
        page = client.get(f"/runs/{pinned.id}").text
        assert DIGEST in page and IMAGE in page
        assert 'data-action="rerun"' in page
        api = client.get(f"/api/runs/{pinned.id}").json()
        assert (api["image"], api["image_digest"], api["worker_version"], api["source_revision"]) == (
            IMAGE,
            DIGEST,
            "0.1.0",
            "c0ffee",
        )
        assert 'data-action="rerun"' not in client.get(f"/runs/{unknown.id}").text


@pytest.fixture
def slurm_client(slurm: None, profiled_settings: Settings) -> Iterator[TestClient]:
    with make_client(profiled_settings, SlurmScheduler()) as client:
        yield client


@pytest.mark.slurm
def test_run_again_submits_the_same_spec_pinned_to_the_digest(slurm_client, session, tmp_path):
    original = finished_run(session, tmp_path / "r", "podman", image=IMAGE, image_digest=DIGEST)
    response = slurm_client.post(f"/api/runs/{original.id}/rerun")
    assert response.status_code == 201, response.text
    again = response.json()
    try:
        assert again["rerun_of"] == original.id and again["id"] != original.id
        assert (again["experiment_id"], again["spec"], again["profile"]) == (
            original.experiment_id,
            original.spec,
            "podman",
        )
        assert again["position"] == original.position + 1
        assert again["state"] == "submitted" and again["job_id"].isdigit()
        script = (Path(again["run_dir"]) / SCRIPT_FILE).read_text()
        pinned = f"localhost/scalelab-worker@{DIGEST}"
        assert f"export SCALELAB_IMAGE={pinned}\n" in script
        assert f"    {pinned} -m worker train" in script and ":latest" not in script
        assert session.get(Experiment, original.experiment_id) is not None
    finally:
        slurm_client.post(f"/api/runs/{again['id']}/cancel")
