"""The client's views of the API's answers: they read what the real server sends, and what a newer one might."""

from __future__ import annotations

import pytest

from client import schemas
from contract.spec import INFERENCE_ONLY_FIELDS, RunSpec
from tests.factories import course_log


def newer(answer: dict) -> dict:
    """The answer as a newer server might send it: a field more in it and in each of its items."""
    grown = {**answer, "from_a_newer_server": {"any": ["shape"]}}
    if isinstance(answer.get("data"), list):
        grown["data"] = [{**item, "from_a_newer_server": 1} for item in answer["data"]]
    return grown


@pytest.fixture
def imported(client):
    """An experiment of two finished runs, made through the API."""
    files = [{"name": f"run_{gpus}.out", "content": course_log(gpus)} for gpus in (1, 2)]
    created = client.post("/api/imports", json={"name": "old", "files": files})
    assert created.status_code == 201, created.text
    return created.json()


def test_every_view_reads_the_real_servers_answer_and_a_newer_ones(client, imported):
    experiment, run = imported["id"], imported["runs"][0]["id"]
    answers: list[tuple[type[schemas.View], str]] = [
        (schemas.ExperimentsView, "/api/experiments"),
        (schemas.ExperimentView, f"/api/experiments/{experiment}"),
        (schemas.CompareView, f"/api/experiments/{experiment}/compare"),
        (schemas.RunsView, f"/api/runs?experiment_id={experiment}"),
        (schemas.RunView, f"/api/runs/{run}"),
        (schemas.LogView, f"/api/runs/{run}/log"),
        (schemas.EventsView, f"/api/runs/{run}/events"),
        (schemas.ProfilesView, "/api/profiles"),
        (schemas.ProfileView, "/api/profiles/local"),
    ]
    for view, path in answers:
        answer = client.get(path).json()
        # Equal: the view keeps what it knows of the newer answer, and nothing more.
        assert view.model_validate(answer) == view.model_validate(newer(answer)), path


def test_a_preview_leaves_the_inference_fields_out_of_a_training_sweeps_settings(client):
    request = {"name": "s", "base": {"model": "mlp", "epochs": 1}, "grid": {"gpus": [1, 2]}}
    preview = schemas.PreviewView.model_validate(newer(client.post("/api/experiments/preview", json=request).json()))
    assert [spec["gpus"] for spec in preview.settings()] == [1, 2]
    assert all(INFERENCE_ONLY_FIELDS.isdisjoint(spec) for spec in preview.settings())
    assert set(preview.runs[0]) >= INFERENCE_ONLY_FIELDS  # the answer has them; only the settings leave them out
    inference = {**preview.runs[0], "kind": "inference"}
    assert (
        set(schemas.PreviewView.model_validate({**preview.model_dump(), "runs": [inference]}).settings()[0])
        >= INFERENCE_ONLY_FIELDS
    )


def test_a_skipped_combination_reads_as_the_server_words_it():
    assert str(schemas.SkippedView(combination={"strategy": "ddp", "gpus": 3}, reason="too few")) == (
        "strategy=ddp, gpus=3: too few"
    )
    assert str(schemas.SkippedView(combination={}, reason="epochs must be 1 or more")) == (
        "the base spec: epochs must be 1 or more"
    )


def test_a_program_runs_settings_are_what_it_reads_flattened_to_print():
    program: dict[str, object] = {"command": ["python", "train.py", "two words"], "workdir": "/home/a"}
    program["launcher"] = "torchrun"
    program |= {"env": {"TOKEN": "s3cret", "OMP_NUM_THREADS": "1"}, "image": None, "params": {"lr": 0.1, "amp": True}}
    spec = RunSpec.model_validate({"kind": "program", "gpus": 2, "program": program}).model_dump(mode="json")
    assert schemas.spec_settings(spec) == {
        "kind": "program",
        "strategy": "ddp",
        "nodes": 1,
        "gpus": 2,
        "seed": 0,
        "command": "python train.py 'two words'",
        "workdir": "/home/a",
        "launcher": "torchrun",
        "image": None,
        "env": "TOKEN,OMP_NUM_THREADS",  # names: a value may be a secret
        "params.lr": 0.1,
        "params.amp": True,
    }
    by_env = RunSpec.model_validate({"kind": "program", "program": program | {"params_style": "env"}})
    assert schemas.spec_settings(by_env.model_dump(mode="json"))["params_style"] == "env"
    # A training run's spec loses only its inference fields, and a program's null.
    trains = schemas.spec_settings(RunSpec().model_dump(mode="json"))
    assert "program" not in trains and INFERENCE_ONLY_FIELDS.isdisjoint(trains)
    assert trains["model"] == "mlp"


def test_a_runs_target_is_printed_in_words_and_a_run_without_one_prints_none():
    aimed = RunSpec(target={"metric": "val_loss", "at_most": 0.2}).model_dump(mode="json")
    assert schemas.spec_settings(aimed)["target"] == "val_loss <= 0.2"
    assert "target" not in schemas.spec_settings(RunSpec().model_dump(mode="json"))
