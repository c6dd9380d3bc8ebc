"""Rerun the failed: an experiment's failed runs, of the kinds asked, run again as new runs with changes, linked to
their originals; refused, with nothing written, when a change makes one invalid or nothing matches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from contract.states import FailureKind, RunState
from server.models import Experiment, Run
from server.scheduler.slurm import SlurmScheduler
from server.services import users
from tests.conftest import bearer, make_client
from tests.factories import experiment_request, experiment_row, run_row, spec, tiny_gpt_request
from tests.server.api.test_experiments import unreachable_sbatch

OOM, PROGRAM, TIME = FailureKind.out_of_memory, FailureKind.program_error, FailureKind.time_limit


def failed_grid(session: Session, tmp_path: Path, owner: str | None = None) -> tuple[Experiment, dict[str, Run]]:
    """An experiment of one slot, held by a live run (so that its reruns wait for it and no job starts), with a
    completed run and failed runs of three kinds."""
    experiment = experiment_row(session, request=experiment_request(), max_concurrent=1, owner=owner)
    rows: dict[str, Any] = {
        "done": {"state": RunState.completed},
        "oom": {"state": RunState.out_of_memory, "failure_kind": OOM},
        "program": {"state": RunState.failed, "failure_kind": PROGRAM},
        "slow": {"state": RunState.timeout, "failure_kind": TIME, "run_spec": spec(gpus=2, strategy="ddp")},
        "live": {"state": RunState.running, "job_id": "1"},
    }
    runs = {
        name: run_row(session, experiment, tmp_path / name, position=position, profile="local", owner=owner, **fields)
        for position, (name, fields) in enumerate(rows.items())
    }
    return experiment, runs


def run_count(client: TestClient, experiment: Experiment) -> int:
    count: int = client.get(f"/api/runs?experiment_id={experiment.id}").json()["count"]
    return count


def test_reruns_the_failed_of_the_chosen_kinds_with_the_change_linked_to_their_originals(client, session, tmp_path):
    experiment, runs = failed_grid(session, tmp_path)
    asked = {"failed": True, "kinds": ["out_of_memory", "time_limit"], "set": {"global_batch_size": 32}}
    response = client.post(f"/api/experiments/{experiment.id}/rerun", json=asked)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["count"] == 2
    assert [run["rerun_of"] for run in body["data"]] == [runs["oom"].id, runs["slow"].id]
    for new, original in zip(body["data"], (runs["oom"], runs["slow"]), strict=True):
        assert new["spec"] == {**original.spec, "global_batch_size": 32}
        assert (new["experiment_id"], new["profile"], new["failure_kind"]) == (experiment.id, "local", None)
        # The experiment's slot is the live run's: the reruns wait their turn, as its own runs would.
        assert (new["state"], new["waiting"], new["job_id"]) == ("created", True, None)
        assert Path(new["run_dir"], "job.sbatch").is_file()
    assert [run["position"] for run in body["data"]] == [5, 6]
    # The originals stay as they ended.
    kept = client.get(f"/api/runs/{runs['oom'].id}").json()
    assert (kept["state"], kept["failure_kind"]) == ("out_of_memory", "out_of_memory")
    assert run_count(client, experiment) == 7

    # Asked again, the runs rerun already are not repeated; named, they are.
    again = client.post(f"/api/experiments/{experiment.id}/rerun", json={"kinds": ["out_of_memory"]})
    assert again.status_code == 409
    detail = again.json()["detail"]
    assert f"no failed run of kind out_of_memory in experiment {experiment.id}" in detail
    assert "2 failed runs were rerun already: name them in run_ids" in detail
    named = client.post(f"/api/experiments/{experiment.id}/rerun", json={"run_ids": [runs["oom"].id]})
    assert named.status_code == 201, named.text
    assert [run["rerun_of"] for run in named.json()["data"]] == [runs["oom"].id]
    assert named.json()["data"][0]["spec"] == runs["oom"].spec


def test_without_a_body_every_failed_run_but_none_that_completed_or_is_live(client, session, tmp_path):
    experiment, runs = failed_grid(session, tmp_path)
    response = client.post(f"/api/experiments/{experiment.id}/rerun")  # no body: every failed run, unchanged
    assert response.status_code == 201, response.text
    assert [run["rerun_of"] for run in response.json()["data"]] == [runs[n].id for n in ("oom", "program", "slow")]


@pytest.mark.parametrize(
    ("changes", "loc", "words"),
    [
        ({"global_batch_size": 0}, ["body", "set", "global_batch_size"], "greater than or equal to 1"),
        ({"no_such_field": 1}, ["body", "set", "no_such_field"], "Extra inputs are not permitted"),
        ({"target": {"metric": "val_loss", "at_most": 1}}, ["body", "set", "target"], "set by the server"),
        # Valid for the 1-process runs, not for the 2-process one after them: none is rerun.
        ({"strategy": "single"}, ["body", "set"], "strategy 'single' runs one process, but gpus is 2"),
        ({"gpus": 64, "strategy": "ddp"}, ["body", "set"], "GPUs per node"),
    ],
)
def test_a_change_that_makes_a_rerun_invalid_is_refused_naming_the_field_with_nothing_written(
    client, session, settings, tmp_path, changes, loc, words
):
    experiment, _ = failed_grid(session, tmp_path)
    before = sorted(settings.runs_dir.iterdir()) if settings.runs_dir.exists() else []
    response = client.post(f"/api/experiments/{experiment.id}/rerun", json={"failed": True, "set": changes})
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert errors[0]["loc"] == loc
    assert words in errors[0]["msg"]
    assert run_count(client, experiment) == 5
    assert (sorted(settings.runs_dir.iterdir()) if settings.runs_dir.exists() else []) == before


def test_a_change_whose_tensor_parallel_degree_does_not_split_the_heads_is_refused(client, session, tmp_path):
    """The checks each grid combination passes apply to a rerun's changed spec too, not the partition's alone: a
    tensor-parallel degree that does not divide the model's heads would fail at its job's start, after the queue."""
    request = {**tiny_gpt_request(), "grid": {}}
    experiment = experiment_row(session, request=request)
    failed = run_row(
        session,
        experiment,
        tmp_path / "failed",
        profile="local",
        state=RunState.failed,
        failure_kind=PROGRAM,
        run_spec=spec(**request["base"]),
    )
    refused = client.post(f"/api/experiments/{experiment.id}/rerun", json={"set": {"strategy": "tp", "gpus": 3}})
    assert refused.status_code == 422, refused.text
    (error,) = refused.json()["detail"]
    assert error["loc"] == ["body", "set"]
    assert error["msg"].startswith(f"run {failed.id}: gpt has 2 attention heads, which do not split over 3 ranks")
    assert run_count(client, experiment) == 1
    accepted = client.post(f"/api/experiments/{experiment.id}/rerun", json={"set": {"strategy": "tp", "gpus": 2}})
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["data"][0]["spec"]["strategy"] == "tp"


def test_refuses_when_no_run_matches_and_says_what_failed(client, session, tmp_path):
    experiment, runs = failed_grid(session, tmp_path)
    response = client.post(f"/api/experiments/{experiment.id}/rerun", json={"kinds": ["collective_timeout"]})
    assert response.status_code == 409
    detail = response.json()["detail"]
    assert detail.startswith(f"no failed run of kind collective_timeout in experiment {experiment.id}")
    assert "(its failed runs are: out_of_memory, program_error, time_limit)" in detail
    completed = client.post(f"/api/experiments/{experiment.id}/rerun", json={"run_ids": [runs["done"].id]})
    assert completed.status_code == 409 and f"no failed run among runs {runs['done'].id}" in completed.text
    elsewhere = client.post(f"/api/experiments/{experiment.id}/rerun", json={"run_ids": ["0000000000"]})
    assert elsewhere.status_code == 422
    assert elsewhere.json()["detail"][0]["loc"] == ["body", "run_ids"]
    assert client.post(f"/api/experiments/{experiment.id}/rerun", json={"kinds": ["nonsense"]}).status_code == 422
    assert client.post(f"/api/experiments/{experiment.id}/rerun", json={"failed": False}).status_code == 422
    assert run_count(client, experiment) == 5


def test_another_users_experiment_is_refused(client, session, tmp_path):
    users.add_user(session, "alice")
    bob = bearer(users.add_user(session, "bob"))
    experiment, _ = failed_grid(session, tmp_path, owner="alice")
    url = f"/api/experiments/{experiment.id}/rerun"
    assert client.post(url, json={}, headers=bob).status_code == 404  # private: as one that does not exist
    experiment.sharing = "everyone"
    session.add(experiment)
    session.commit()
    refused = client.post(url, json={}, headers=bob)
    assert refused.status_code == 403 and "only its owner or an admin may" in refused.json()["detail"]
    assert client.post("/api/experiments/nowhere/rerun", json={}).status_code == 404
    assert run_count(client, experiment) == 5


def test_an_unreachable_controller_answers_503_and_keeps_the_reruns_to_resubmit(settings, session, tmp_path):
    experiment = experiment_row(session, request=experiment_request())
    failed = run_row(session, experiment, tmp_path / "a", state=RunState.failed, failure_kind=PROGRAM, profile="local")
    with make_client(settings, SlurmScheduler(run=unreachable_sbatch)) as client:
        response = client.post(f"/api/experiments/{experiment.id}/rerun", json={"set": {"seed": 1}})
        assert response.status_code == 503, response.text
        assert response.json()["experiment_id"] == experiment.id
        assert "the new runs are kept as submit_failed" in response.json()["detail"]
        runs = client.get(f"/api/runs?experiment_id={experiment.id}").json()["data"]
        kept = [run for run in runs if run["id"] != failed.id]
        assert [(run["state"], run["rerun_of"], run["spec"]["seed"]) for run in kept] == [
            ("submit_failed", failed.id, 1)
        ]


def test_the_preview_says_what_would_rerun_with_which_change_and_writes_nothing(client, session, settings, tmp_path):
    experiment, runs = failed_grid(session, tmp_path)
    url = f"/api/experiments/{experiment.id}/rerun/preview"
    asked = {"kinds": ["out_of_memory", "time_limit"], "set": {"global_batch_size": 32, "precision": "bf16"}}
    preview = client.post(url, json=asked)
    assert preview.status_code == 200, preview.text
    body = preview.json()
    assert body["count"] == 2
    assert [(item["rerun_of"], item["state"], item["failure_kind"]) for item in body["data"]] == [
        (runs["oom"].id, "out_of_memory", "out_of_memory"),
        (runs["slow"].id, "timeout", "time_limit"),
    ]
    assert body["data"][0]["changed"] == {"global_batch_size": 32, "precision": "bf16"}
    assert body["data"][0]["spec"] == {**runs["oom"].spec, "global_batch_size": 32, "precision": "bf16"}
    assert client.post(url, json={"set": {"epochs": 0}}).json()["detail"][0]["loc"] == ["body", "set", "epochs"]
    assert client.post(url, json={"kinds": ["hung"]}).status_code == 409
    assert run_count(client, experiment) == 5
    assert not (settings.runs_dir.exists() and any(settings.runs_dir.iterdir()))
