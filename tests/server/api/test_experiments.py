"""The experiments API on a temporary SQLite: validation, submission, listing, comparison."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import time

import pytest
from sqlmodel import Session, func, select

from contract.records import WorkerRecord
from contract.states import RunState
from server.config import Settings
from server.models import Experiment, Run
from server.scheduler.slurm import SlurmScheduler
from tests.conftest import make_client
from tests.factories import epoch, experiment_request, experiment_row, printed_run, run_row, start


def counts(client) -> tuple[int, int]:
    with Session(client.app.state.engine) as session:
        return (
            session.exec(select(func.count()).select_from(Experiment)).one(),
            session.exec(select(func.count()).select_from(Run)).one(),
        )


def error_locs(response) -> list[tuple]:
    assert response.status_code == 422, response.text
    return [tuple(error["loc"]) for error in response.json()["detail"]]


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        ({"name": ""}, ("body", "name")),
        ({"base": {"epochs": 0}}, ("body", "base", "epochs")),
        ({"base": {"lr": "fast"}}, ("body", "base", "lr")),
        ({"base": {"model": "mlp; rm -rf /"}}, ("body", "base", "model")),
        ({"base": {"nodes": 2}}, ("body", "base", "nodes")),
        ({"grid": {"gpus": [1, -2]}}, ("body", "grid", "gpus", 1)),
        ({"grid": {"strategy": ["ddp", "$(touch /tmp/pwned)"]}}, ("body", "grid", "strategy", 1)),
        ({"grid": {"flavour": ["x"]}}, ("body", "grid", "flavour")),
        ({"resources": {"nodes": 1, "time_limit": "ten minutes"}}, ("body", "resources", "time_limit")),
        ({"resources": {"nodes": 1, "time_limit": "00:00:30"}}, ("body", "resources", "time_limit")),
        ({"resources": {"nodes": 0}}, ("body", "resources", "nodes")),
        ({"priority": "high"}, ("body", "priority")),
        ({"on_failure": "sometimes"}, ("body", "on_failure")),
    ],
)
def test_invalid_field_is_named_and_nothing_is_created(client, settings, change, loc):
    response = client.post("/api/experiments", json=experiment_request(**change))
    assert loc in error_locs(response)
    assert counts(client) == (0, 0)
    assert not settings.runs_dir.exists() or not any(settings.runs_dir.iterdir())


def test_combinations_that_cannot_run_are_all_reported(client):
    request = experiment_request(base={"global_batch_size": 30}, grid={"gpus": [1, 2, 4, 8]})
    response = client.post("/api/experiments", json=request)
    assert error_locs(response) == [("body", "grid"), ("body", "grid")]
    messages = [error["msg"] for error in response.json()["detail"]]
    assert messages[0].startswith("gpus=4: global_batch_size (30) must be divisible by gpus (4)")
    assert messages[1].startswith("gpus=8:")
    # Marked as combinations, so a client can offer on_invalid "skip" without reading the words.
    assert {error["type"] for error in response.json()["detail"]} == {"unrunnable"}
    assert counts(client) == (0, 0)


def gpt_request(**base) -> dict:
    fields = {"model": "gpt", "dataset": "text", "epochs": 1, "global_batch_size": 48, **base}
    return experiment_request(base=fields, grid={})


@pytest.mark.parametrize(
    ("base", "field", "heads"),
    [
        ({"strategy": "tp", "gpus": 3}, "gpus", 4),  # gpt's default heads, from contract/configs.py
        ({"strategy": "fsdp_tp", "gpus": 6, "tp_degree": 3}, "tp_degree", 4),
        ({"strategy": "tp", "gpus": 2, "heads": 3, "width": 96}, "gpus", 3),
    ],
)
def test_a_tensor_parallel_degree_that_does_not_divide_the_heads_is_refused_at_its_field(client, base, field, heads):
    for path in ("/api/experiments/preview", "/api/experiments"):
        response = client.post(path, json=gpt_request(**base))
        assert error_locs(response) == [("body", "base", field)]
        message = response.json()["detail"][0]["msg"]
        assert f"gpt has {heads} attention heads" in message and f"({field})" in message, message
    assert counts(client) == (0, 0)


def test_swept_tensor_parallel_degrees_that_do_not_divide_the_heads_are_combinations_to_skip(client):
    request = gpt_request(strategy="tp")
    request["grid"] = {"gpus": [2, 3, 4]}
    refused = client.post("/api/experiments/preview", json=request)
    assert error_locs(refused) == [("body", "grid")]
    assert refused.json()["detail"][0]["msg"].startswith("gpus=3: gpt has 4 attention heads")
    assert refused.json()["detail"][0]["type"] == "unrunnable"
    skipped = client.post("/api/experiments/preview", json={**request, "on_invalid": "skip"})
    assert [run["gpus"] for run in skipped.json()["runs"]] == [2, 4]


def test_a_grid_too_large_is_not_marked_as_combinations_to_skip(client):
    grid = {"seed": list(range(32)), "lr": [0.001 * (i + 1) for i in range(32)]}  # 1,024 runs, beyond the limit
    response = client.post("/api/experiments", json=experiment_request(grid=grid))
    assert error_locs(response) == [("body", "grid")]
    assert response.json()["detail"][0]["type"] == "value_error"


def test_unwritable_runs_directory_is_a_clear_error_and_leaves_nothing(settings, local_scheduler):
    settings.runs_dir.parent.mkdir(parents=True, exist_ok=True)
    settings.runs_dir.write_text("a file where the runs directory should be")
    with make_client(settings, local_scheduler) as client:
        response = client.post("/api/experiments", json=experiment_request())
        assert response.status_code == 507
        assert "nothing was submitted" in response.json()["detail"]
        assert counts(client) == (0, 0)


def failing_sbatch(argv):
    """Slurm refusing a job the way a real controller does when the account does not exist."""
    return subprocess.CompletedProcess(
        argv, 1, "", "sbatch: error: Batch job submission failed: Invalid account or account/partition combination"
    )


def unreachable_sbatch(argv):
    """What sbatch prints when slurmctld is down (the real-Slurm test of this is in tests/e2e)."""
    return subprocess.CompletedProcess(
        argv, 1, "", "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"
    )


def test_refused_submission_is_kept_with_the_scheduler_message(settings):
    with make_client(settings, SlurmScheduler(run=failing_sbatch)) as client:
        response = client.post("/api/experiments", json=experiment_request(grid={"gpus": [1, 2]}))
        assert response.status_code == 201
        runs = response.json()["runs"]
        assert [run["state"] for run in runs] == ["submit_failed", "submit_failed"]
        assert "Invalid account" in runs[0]["message"]
        assert response.json()["states"] == {"submit_failed": 2}


def test_an_unreachable_controller_answers_503_and_keeps_the_runs_to_resubmit(settings):
    # One job per run (as one array, tests/server/api/test_arrays_api.py).
    one_by_one = Settings(**{**settings.model_dump(), "job_arrays": False})
    with make_client(one_by_one, SlurmScheduler(run=unreachable_sbatch)) as client:
        response = client.post("/api/experiments", json=experiment_request(grid={"seed": list(range(10))}))
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "30"
        detail = response.json()["detail"]
        assert "Slurm cannot be reached" in detail and "10 of its 10 runs are kept as submit_failed" in detail
        runs = client.get("/api/runs").json()["data"]
        # The experiment kept is named as a field, for clients to resubmit it without reading the message.
        assert response.json()["experiment_id"] == runs[0]["experiment_id"]
        assert {run["state"] for run in runs} == {"submit_failed"}
        # Once sbatch failed to reach the controller, no more were started (each would wait as long): only those
        # already under way, as many as the scheduler submits at once, were tried.
        tried = [run for run in runs if not run["message"].startswith("not submitted: ")]
        assert len(tried) == SlurmScheduler.submit_concurrency
        assert {run["attempt"] for run in tried} == {1}


def test_unknown_ids_are_404(client):
    assert client.get("/api/experiments/nope").status_code == 404
    assert client.get("/api/experiments/nope/compare").status_code == 404
    assert client.get("/api/experiments/nope/compare.csv").status_code == 404
    assert client.get("/api/experiments/nope/failures").status_code == 404
    assert client.get("/api/experiments/nope/fabric").status_code == 404
    assert client.post("/api/experiments/nope/cancel").status_code == 404
    assert client.get("/api/runs/nope").status_code == 404
    assert client.get("/api/runs/nope/metrics").status_code == 404


def test_openapi_documents_every_route(client):
    schema = client.get("/openapi.json").json()
    assert set(schema["paths"]) == {
        "/api/experiments",
        "/api/experiments/{experiment_id}",
        "/api/experiments/{experiment_id}/compare",
        "/api/experiments/{experiment_id}/scaling",
        "/api/experiments/{experiment_id}/report.html",
        "/api/experiments/{experiment_id}/inference",
        "/api/experiments/{experiment_id}/fabric",
        "/api/experiments/{experiment_id}/failures",
        "/api/runs/{run_id}/generations",
        "/api/runs/{run_id}/fabric",
        "/api/experiments/preview",
        "/api/experiments/{experiment_id}/compare.csv",
        "/api/experiments/{experiment_id}/cancel",
        "/api/imports",
        "/api/fabric",
        "/api/experiments/{experiment_id}/card",
        "/api/cards",
        "/api/cards/verify",
        "/api/experiments/{experiment_id}/reference",
        "/api/experiments/{experiment_id}/aa",
        "/api/experiments/{experiment_id}/regression",
        "/api/references/{experiment_id}/history",
        "/api/noise-floors",
        "/api/notifications/settings",
        "/api/notifications/test",
        "/api/notifications/deliveries",
        "/api/runs",
        "/api/runs/{run_id}",
        "/api/runs/{run_id}/metrics",
        "/api/runs/{run_id}/log",
        "/api/runs/{run_id}/cancel",
        "/api/runs/{run_id}/resubmit",
        "/api/runs/{run_id}/rerun",
        "/api/runs/{run_id}/events",
        "/api/runs/{run_id}/stacks",
        "/api/runs/{run_id}/code",
        "/api/experiments/{experiment_id}/resubmit",
        "/api/experiments/{experiment_id}/clone",
        "/api/experiments/{experiment_id}/rerun",
        "/api/experiments/{experiment_id}/rerun/preview",
        "/api/experiments/{experiment_id}/sharing",
        "/api/profiles",
        "/api/profiles/{name}",
        "/api/compare",
        "/api/compare.csv",
        "/api/scaling",
        "/api/prediction",
        "/api/experiments/{experiment_id}/prediction",
        "/api/plans",
        "/api/plans/{plan_id}",
        "/api/plans/{plan_id}/experiment",
        "/api/tokens",
        "/api/tokens/{token_id}",
        "/healthz",
        "/readyz",
        "/metrics",
    }
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            assert operation.get("summary"), f"{method} {path} has no summary"
    grid = schema["components"]["schemas"]["SpecGrid"]["properties"]
    assert {"strategy", "gpus", "global_batch_size", "lr", "nodes"} <= set(grid)


def test_preview_expands_and_renders_but_writes_and_submits_nothing(client, settings):
    request = experiment_request(grid={"gpus": [1, 2, 4]})
    response = client.post("/api/experiments/preview", json=request)
    assert response.status_code == 200, response.text
    preview = response.json()
    assert (preview["name"], preview["count"]) == (request["name"], 3)
    assert [spec["gpus"] for spec in preview["runs"]] == [1, 2, 4]
    script = preview["script"]
    assert script.startswith("#!/bin/bash\n")
    assert f"{settings.runs_dir}/RUN_ID/spec.json" in script
    assert "--nproc-per-node=1" in script  # the first run's, on this app's local scheduler
    assert counts(client) == (0, 0)
    assert not settings.runs_dir.exists() or not any(settings.runs_dir.iterdir())


def test_preview_script_is_what_submission_writes(settings):
    with make_client(settings, SlurmScheduler(run=failing_sbatch)) as client:
        request = experiment_request(grid={"gpus": [2]})
        preview = client.post("/api/experiments/preview", json=request).json()
        run = client.post("/api/experiments", json=request).json()["runs"][0]
    written = (settings.runs_dir / run["id"] / "job.sbatch").read_text()
    assert preview["script"] == written.replace(run["id"], "RUN_ID")


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        ({"base": {"epochs": 0}}, ("body", "base", "epochs")),
        ({"grid": {"strategy": ["ddp", "$(touch /tmp/pwned)"]}}, ("body", "grid", "strategy", 1)),
        ({"base": {"global_batch_size": 30}, "grid": {"gpus": [4]}}, ("body", "grid")),
    ],
)
def test_preview_refuses_what_submission_refuses(client, change, loc):
    assert loc in error_locs(client.post("/api/experiments/preview", json=experiment_request(**change)))


def test_compare_csv_has_a_header_and_a_line_per_run(client, session, tmp_path):
    experiment = experiment_row(session)
    for gpus in (1, 2):
        # Epochs of 6 s and 2 s on one GPU: warm-up is left out of the mean.
        records: list[WorkerRecord] = [start(), epoch(1, 6 / gpus), epoch(2, 2 / gpus, val_loss=None)]
        printed_run(session, experiment, tmp_path / str(gpus), records, gpus=gpus)
    response = client.get(f"/api/experiments/{experiment.id}/compare.csv")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    json_rows = client.get(f"/api/experiments/{experiment.id}/compare").json()["data"]
    # The same fields in the same order; a nested one (time breakdown, resources) a column per part; the custom
    # metrics a column each, of which the worker's runs have none.
    assert list(dict.fromkeys(column.split(".")[0] for column in rows[0])) == [
        name for name in json_rows[0] if name != "metrics"
    ]
    picked = [(row["gpus"], row["speedup"], row["final_val_loss"]) for row in rows]
    assert picked == [("1", "1.0", ""), ("2", "2.0", "")]
    assert float(rows[1]["mean_epoch_time_s"]) == json_rows[1]["mean_epoch_time_s"]


def test_cancel_experiment_stops_what_has_not_ended(client, session, tmp_path):
    experiment = experiment_row(session)
    states = [RunState.completed, RunState.created, RunState.submit_failed, RunState.created]
    runs = [
        run_row(session, experiment, tmp_path / str(position), state=state, position=position)
        for position, state in enumerate(states)
    ]
    response = client.post(f"/api/experiments/{experiment.id}/cancel")
    assert response.status_code == 202, response.text
    body = response.json()
    assert [run["id"] for run in body["data"]] == [runs[1].id, runs[3].id]
    assert {run["state"] for run in body["data"]} == {"cancelled"}
    assert client.get(f"/api/experiments/{experiment.id}").json()["states"] == {
        "completed": 1,
        "cancelled": 2,
        "submit_failed": 1,
    }
    again = client.post(f"/api/experiments/{experiment.id}/cancel")
    assert again.status_code == 409
    assert "has already ended" in again.json()["detail"]


def test_cancel_experiment_names_the_jobs_the_scheduler_could_not_cancel(client, session, tmp_path):
    experiment = experiment_row(session)
    elsewhere = run_row(session, experiment, tmp_path / "a", job_id="7", scheduler="slurm")
    unsubmitted = run_row(session, experiment, tmp_path / "b", state=RunState.created, position=1)
    response = client.post(f"/api/experiments/{experiment.id}/cancel")
    assert response.status_code == 502
    assert response.json()["detail"].startswith(f"could not cancel 1 of 2 runs (the others were): run {elsewhere.id}: ")
    assert client.get(f"/api/runs/{unsubmitted.id}").json()["state"] == "cancelled"


@pytest.mark.torch
def test_experiment_trains_on_the_local_scheduler_and_compares(client, settings):
    request = experiment_request(base={"epochs": 2, "global_batch_size": 32}, grid={"gpus": [1, 2]})
    response = client.post("/api/experiments", json=request)
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["run_count"] == 2
    runs = created["runs"]
    assert [run["spec"]["gpus"] for run in runs] == [1, 2]
    for run in runs:
        assert run["state"] == "submitted"
        assert run["job_id"].startswith("local-")
        run_dir = settings.runs_dir / run["id"]
        assert (run_dir / "spec.json").exists()
        assert (run_dir / "job.sbatch").read_text().startswith("#!/bin/bash\n")

    listed = client.get(f"/api/runs?experiment_id={created['id']}").json()["data"]
    assert [run["position"] for run in listed] == [0, 1]

    monitor = client.app.state.monitor
    deadline = time.monotonic() + 600  # two local training runs; minutes on a loaded 2-core machine
    while time.monotonic() < deadline:
        monitor.cycle()
        states = {run["state"] for run in client.get(f"/api/runs?experiment_id={created['id']}").json()["data"]}
        if all(RunState(state).is_final for state in states):
            break
        time.sleep(0.5)
    logs = {run["id"]: (settings.runs_dir / run["id"] / "output.log").read_text()[-2000:] for run in runs}
    assert states == {"completed"}, logs
    monitor.cycle()  # the final read after the end

    for run in runs:
        metrics = client.get(f"/api/runs/{run['id']}/metrics").json()
        # The worker also prints each rank's peak memory and timings per epoch, and its compute probe after the
        # start; the run's own course is the rest.
        kinds = [record["kind"] for record in metrics["data"] if record["kind"] not in ("memory", "timing", "compute")]
        # The batch script times the launch around the worker (its own records, before and after).
        assert kinds == ["launch", "start", "epoch", "epoch", "end", "launch"]
        assert metrics["data"][1]["world_size"] == run["spec"]["gpus"]
        only_epochs = client.get(f"/api/runs/{run['id']}/metrics?kind=epoch").json()
        assert only_epochs["count"] == 2
        assert client.get(f"/api/runs/{run['id']}").json()["exit_code"] == "0:0"

    compare = client.get(f"/api/experiments/{created['id']}/compare").json()
    assert compare["count"] == 2
    rows = compare["data"]
    assert [row["gpus"] for row in rows] == [1, 2]
    assert rows[0]["speedup"] == 1.0
    assert rows[1]["speedup"] > 0
    assert all(row["final_val_accuracy"] > 0.5 and row["peak_memory_bytes"] > 0 for row in rows)
    # Same global batch, same data: data parallel gives the same model.
    assert rows[1]["final_val_loss"] == pytest.approx(rows[0]["final_val_loss"], rel=1e-4)

    experiment = client.get(f"/api/experiments/{created['id']}").json()
    assert experiment["states"] == {"completed": 2}


@pytest.mark.parametrize(
    ("target", "loc", "words"),
    [
        ({"metric": "grad_norm", "at_most": 1.0}, ("body", "target", "metric"), "model 'mlp' does not report it"),
        ({"metric": "val_perplexity", "at_most": 20}, ("body", "target", "metric"), "val_loss at_most ln P"),
        ({"metric": "val_accuracy", "at_least": 95}, ("body", "target"), "0.95 is 95 %"),
        ({"metric": "epoch_time_s", "at_most": 1}, ("body", "target", "metric"), "measures speed or memory"),
        ({"metric": "Val Acc", "at_least": 0.9}, ("body", "target", "metric"), "lowercase letters, digits and _"),
        ({"metric": "val_loss", "at_least": 0.1, "at_most": 0.2}, ("body", "target"), "exactly one bound"),
        ({"metric": "val_loss"}, ("body", "target"), "exactly one bound"),
    ],
)
def test_a_target_its_runs_cannot_report_or_reach_is_refused_naming_it(client, target, loc, words):
    for path in ("/api/experiments/preview", "/api/experiments"):
        response = client.post(path, json={**experiment_request(), "target": target})
        assert response.status_code == 422
        assert error_locs(response) == [loc]
        assert words in response.json()["detail"][0]["msg"]
    assert counts(client) == (0, 0)


def test_a_target_reaches_every_run_and_the_rate_each_run_uses_is_in_its_spec(client):
    request = experiment_request(
        base={"model": "mlp", "dataset": "digits", "strategy": "ddp", "global_batch_size": 32, "lr": 0.05,
              "lr_scaling": "linear", "warmup_epochs": 2, "stop_at_target": True},
        grid={"gpus": [1, 2]},
    )  # fmt: skip
    request.update(target={"metric": "val_accuracy", "at_least": 0.95}, scaling="weak")
    response = client.post("/api/experiments", json=request)
    assert response.status_code == 201, response.text
    specs = [run["spec"] for run in response.json()["runs"]]
    assert [(s["global_batch_size"], s["lr"], s["reference_lr"]) for s in specs] == [(32, 0.05, 0.05), (64, 0.1, 0.05)]
    assert {json.dumps(s["target"]) for s in specs} == {'{"metric": "val_accuracy", "at_least": 0.95, "at_most": null}'}
    assert response.json()["request"]["target"] == {"metric": "val_accuracy", "at_least": 0.95}


def test_an_experiment_stops_its_series_after_a_repeating_failure_unless_told_otherwise(client):
    default = client.post("/api/experiments", json=experiment_request()).json()
    assert default["request"]["on_failure"] == "stop_series"
    told = client.post("/api/experiments", json=experiment_request(on_failure="continue")).json()
    assert told["request"]["on_failure"] == "continue"
    summary = client.get(f"/api/experiments/{told['id']}/failures").json()
    assert (summary["run_count"], summary["failed"], summary["kinds"], summary["swept"]) == (3, 0, [], ["gpus"])
