"""Requests checked against cluster profiles; the concurrency limit, resubmission, clones and run events."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from contract.rundir import SCRIPT_FILE
from contract.states import RunState
from tests.conftest import make_client
from tests.factories import experiment_request, experiment_row, run_row
from tests.server.api.test_experiments import counts, error_locs


def test_profiles_are_listed_with_the_default(client):
    listed = client.get("/api/profiles").json()
    assert listed["default"] == "local"
    local = next(profile for profile in listed["data"] if profile["name"] == "local")
    assert local["partitions"]["debug"]["gpus_per_node"] == 8
    assert client.get("/api/profiles/local").json() == local
    assert client.get("/api/profiles/nowhere").status_code == 404


@pytest.mark.parametrize(
    ("resources", "loc", "message"),
    [
        ({"profile": "big"}, ("body", "resources", "profile"), "there is no cluster profile 'big'; there are: local"),
        ({"partition": "gpu"}, ("body", "resources", "partition"), "profile local has no partition 'gpu'"),
        ({"time_limit": "2-00:00:00"}, ("body", "resources", "time_limit"), "allows at most 1-00:00:00"),
        ({"sbatch_options": {"exclusive": "x"}}, ("body", "resources", "sbatch_options", "exclusive"), "allows: mem"),
        ({"sbatch_options": {"nice": 99999}}, ("body", "resources", "sbatch_options", "nice"), "between 0 and 10000"),
        ({"sbatch_options": {"mem": "4G;reboot"}}, ("body", "resources", "sbatch_options", "mem"), "a size like 4096M"),
        ({"nodes": 2}, ("body", "grid"), "partition debug takes at most 1 nodes, not 2"),
    ],
)
def test_requests_beyond_the_profile_are_refused_by_field(client, resources, loc, message):
    request = experiment_request(resources={"time_limit": "00:10:00", **resources}, grid={"gpus": [2]})
    response = client.post("/api/experiments", json=request)
    assert response.status_code == 422, response.text
    assert loc in error_locs(response)
    assert message in response.text
    assert counts(client) == (0, 0)


def test_too_many_gpus_per_node_are_named_and_skippable(client, settings):
    request = experiment_request(grid={"strategy": ["ddp"], "gpus": [2, 16]})
    refused = client.post("/api/experiments/preview", json=request)
    assert refused.status_code == 422
    assert "gpus=16: partition debug has 8 GPUs per node, but gpus=16 on nodes=1 needs 16 per node" in refused.text

    preview = client.post("/api/experiments/preview", json={**request, "on_invalid": "skip"}).json()
    assert preview["count"] == 1
    assert preview["skipped"] == [
        {
            "combination": {"strategy": "ddp", "gpus": 16},
            "reason": "partition debug has 8 GPUs per node, but gpus=16 on nodes=1 needs 16 per node: use more nodes",
        }
    ]
    nothing_runs = client.post(
        "/api/experiments/preview", json={**request, "grid": {"gpus": [16]}, "on_invalid": "skip"}
    )
    assert nothing_runs.status_code == 422 and "no combination can run" in nothing_runs.text


def test_preview_renders_the_run_asked_for_with_the_users_options(client):
    request = experiment_request(grid={"gpus": [1, 2]}, resources={"sbatch_options": {"mem": "2G", "nice": 5}})
    preview = client.post("/api/experiments/preview?index=1", json=request).json()
    assert preview["index"] == 1
    assert "--nproc-per-node=2" in preview["script"]
    assert "#SBATCH --mem=2G\n#SBATCH --nice=5\n" in preview["script"]
    beyond = client.post("/api/experiments/preview?index=2", json=request)
    assert beyond.status_code == 422 and ("query", "index") in error_locs(beyond)


def wait_for(client, run_id: str, states: set[str], timeout_s: float = 60):
    monitor = client.app.state.monitor
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        monitor.cycle()
        run = client.get(f"/api/runs/{run_id}").json()
        if run["state"] in states:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} never reached {states}: {run}")


@pytest.mark.torch
def test_the_concurrency_limit_holds_runs_until_a_slot_frees(client):
    request = experiment_request(grid={"gpus": [1, 1, 1]}, resources={"max_concurrent": 1})
    created = client.post("/api/experiments", json=request).json()
    first, second, third = created["runs"]
    assert (first["state"], first["waiting"]) == ("submitted", False)
    assert [(run["state"], run["waiting"]) for run in (second, third)] == [("created", True)] * 2
    assert second["message"] == "waiting for a slot: at most 1 runs of this experiment run at once"

    client.app.state.monitor.cycle()  # the slot is taken: nothing more is submitted
    assert client.get(f"/api/runs/{second['id']}").json()["waiting"] is True
    # A waiting run is cancelled at once, without a job; the next one still waits its turn.
    assert client.post(f"/api/runs/{third['id']}/cancel").json()["state"] == "cancelled"

    client.post(f"/api/runs/{first['id']}/cancel")
    wait_for(client, first["id"], {"cancelled"})
    second_now = wait_for(client, second["id"], {"submitted", "running"})
    assert second_now["job_id"] and not second_now["waiting"] and second_now["attempt"] == 1
    assert client.get(f"/api/runs/{third['id']}").json()["state"] == "cancelled"
    client.post(f"/api/experiments/{created['id']}/cancel")
    wait_for(client, second["id"], {"cancelled"})


@pytest.mark.parametrize(
    ("isolation", "submitted"), [(None, ["submitted", "created", "created"]), ("shared", ["submitted"] * 3)]
)
def test_exclusive_runs_take_turns_on_the_local_profiles_shared_node(client, isolation, submitted):
    """The local profile's one node is every run's: exclusive (the default for training) means one at a time."""
    request = experiment_request(isolation=isolation)
    created = client.post("/api/experiments", json=request).json()
    assert [run["state"] for run in created["runs"]] == submitted
    if isolation is None:
        assert "run one at a time" in created["runs"][1]["message"]
        script = Path(created["runs"][0]["run_dir"], SCRIPT_FILE).read_text()
        assert "#SBATCH --exclusive" not in script  # nodes every run shares cannot be had whole
    client.post(f"/api/experiments/{created['id']}/cancel")


def test_resubmit_runs_again_what_ended_without_completing(client, session, tmp_path):
    experiment = experiment_row(session, max_concurrent=1)
    done = run_row(session, experiment, tmp_path / "a", state=RunState.completed, scheduler="local")
    cancelled = run_row(session, experiment, tmp_path / "b", state=RunState.cancelled, position=1, job_id="old")
    live = run_row(session, experiment, tmp_path / "c", state=RunState.running, position=2, job_id="x")

    assert "it completed: clone it instead" in client.post(f"/api/runs/{done.id}/resubmit").json()["detail"]
    assert "it is still live: cancel it first" in client.post(f"/api/runs/{live.id}/resubmit").json()["detail"]
    again = client.post(f"/api/runs/{cancelled.id}/resubmit")
    assert again.status_code == 200, again.text
    # Within the experiment's limit of one, it waits for the live run's slot.
    assert (again.json()["state"], again.json()["waiting"], again.json()["job_id"]) == ("created", True, None)
    # Its request set no max_concurrent: the limit of one is exclusive runs taking turns, and it says so.
    assert again.json()["message"].startswith("waiting for its turn: the experiment's runs are exclusive")
    events = client.get(f"/api/runs/{cancelled.id}/events").json()["data"]
    assert [(event["kind"], event["job_id"], event["state"]) for event in events] == [
        ("resubmitted", "old", "cancelled")
    ]
    assert client.post(f"/api/experiments/{experiment.id}/resubmit").status_code == 409


@pytest.mark.torch
def test_clone_lays_changes_over_the_original_request(client):
    original = client.post(
        "/api/experiments",
        json=experiment_request(grid={"strategy": ["ddp"], "gpus": [1, 2]}, resources={"max_concurrent": 1}),
    ).json()
    client.post(f"/api/experiments/{original['id']}/cancel")
    changes = {"name": "again, on one GPU", "base": {"epochs": 1, "seed": None}, "resources": {"max_concurrent": None}}
    clone = client.post(f"/api/experiments/{original['id']}/clone", json={**changes, "grid": {"gpus": [1]}})
    assert clone.status_code == 201, clone.text
    body = clone.json()
    assert body["name"] == "again, on one GPU" and body["run_count"] == 1
    assert body["request"]["base"]["epochs"] == 1 and "seed" not in body["request"]["base"]
    assert body["request"]["grid"] == {"strategy": ["ddp"], "gpus": [1]}
    assert "max_concurrent" not in body["request"]["resources"]
    client.post(f"/api/experiments/{body['id']}/cancel")

    # The whole request's settings are replaced by a clone's, and kept where it leaves them out.
    settings = {"on_failure": "continue", "on_hang": "keep", "target": {"metric": "val_loss", "at_most": 0.5}}
    again = client.post(f"/api/experiments/{original['id']}/clone", json=settings).json()
    assert {name: again["request"].get(name) for name in settings} == settings
    client.post(f"/api/experiments/{again['id']}/cancel")
    kept = client.post(f"/api/experiments/{again['id']}/clone", json={"name": "kept"}).json()
    assert {name: kept["request"].get(name) for name in settings} == settings
    client.post(f"/api/experiments/{kept['id']}/cancel")

    bad = client.post(f"/api/experiments/{original['id']}/clone", json={"base": {"epochs": 0}})
    assert bad.status_code == 422 and ("body", "base", "epochs") in error_locs(bad)
    assert client.post("/api/experiments/nowhere/clone", json={}).status_code == 404


@pytest.mark.torch
def test_events_follow_a_run_from_submission_to_its_end(client):
    created = client.post("/api/experiments", json=experiment_request(grid={"gpus": [1]})).json()
    run_id = created["runs"][0]["id"]
    client.post(f"/api/runs/{run_id}/cancel")
    wait_for(client, run_id, {"cancelled"})
    events = client.get(f"/api/runs/{run_id}/events").json()
    kinds = [event["kind"] for event in events["data"]]
    assert kinds[0] == "submitted" and "cancel_requested" in kinds
    assert events["data"][-1]["state"] == "cancelled" and events["data"][-1]["scheduler_state"] == "CANCELLED"


def test_preview_estimates_memory_per_gpu_and_warns_beyond_the_partition(settings, local_scheduler, tmp_path):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "small.toml").write_text(
        'name = "small"\ndefault_partition = "gpu"\n'
        '[partitions.gpu]\nmax_nodes = 1\ngpus_per_node = 4\nmax_time = "01:00:00"\ngpu_memory_gib = 0.0001\n'
    )
    with make_client(settings.model_copy(update={"profiles_dir": profiles}), local_scheduler) as client:
        request = experiment_request(grid={"strategy": ["ddp", "fsdp"], "gpus": [4]})
        roomy = client.post("/api/experiments/preview", json=request).json()["estimates"]
        assert [estimate["index"] for estimate in roomy] == [0, 1]
        ddp, fsdp = (estimate["estimate"] for estimate in roomy)
        assert ddp["parameter_count"] == fsdp["parameter_count"] == 76_810
        assert fsdp["optimizer_state_bytes"] < ddp["optimizer_state_bytes"]
        assert {estimate["warning"] for estimate in roomy} == {None}  # the local profile knows no GPU memory

        request["resources"] = {"profile": "small"}
        tight = client.post("/api/experiments/preview", json=request).json()["estimates"]
        assert all("exceeds the partition's 0.0001 GiB" in estimate["warning"] for estimate in tight)


@pytest.mark.parametrize("name", ["tab\there", "right\u202eto left", "nul\x00"])
def test_names_that_would_hide_or_disguise_themselves_are_refused(client, name):
    response = client.post("/api/experiments/preview", json=experiment_request(name=name))
    assert response.status_code == 422
    assert ("body", "name") in error_locs(response)


def test_a_refused_value_is_not_echoed_back(client):
    response = client.post("/api/experiments/preview", json=experiment_request(name="x" * 100_000))
    assert response.status_code == 422
    assert len(response.content) < 1000 and "input" not in response.json()["detail"][0]
