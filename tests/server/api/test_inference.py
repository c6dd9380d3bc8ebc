"""Inference experiments through the API: the checkpoint and prompts, their 422s, the files a run gets, the
generations endpoint and the figures of ingested inference records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from contract.records import (
    EndRecord,
    InferenceRecord,
    MemoryRecord,
    RequestRecord,
    StartRecord,
    WorkerRecord,
    format_record,
)
from contract.rundir import CHECKPOINTS_DIR, GENERATIONS_FILE, OUTPUT_FILE, PROMPTS_FILE, SCRIPT_FILE, SPEC_FILE
from contract.states import RunState
from server.models import Run
from server.scheduler.local import LocalScheduler
from server.services import users
from server.services.ingestion.parsing import ingest
from tests.conftest import local_client, make_client
from tests.factories import experiment_row, run_row, spec
from tests.server.api.test_experiments import error_locs

PROMPTS = "def main(\n\nclass Foo:\n  return x\n"


def trained_row(session: Session, run_dir: Path, **overrides: Any) -> Run:
    """A completed gpt training run with a checkpoint, as the server sees it."""
    fields = {"model": "gpt", "dataset": "text", "context": 32, "checkpoint_every": 1, **overrides}
    (run_dir / CHECKPOINTS_DIR / "epoch-1").mkdir(parents=True)
    (run_dir / SPEC_FILE).write_text(spec(**fields).model_dump_json())
    return run_row(
        session, experiment_row(session, "trained"), run_dir, run_spec=spec(**fields), state=RunState.completed
    )


def inference_request(checkpoint: dict[str, str], **base: Any) -> dict[str, Any]:
    return {
        "name": "inference layouts",
        "base": {"kind": "inference", "model": "gpt", "max_new_tokens": 8, "global_batch_size": 2, **base},
        "grid": {"strategy": ["single", "tp"], "gpus": [1, 2], "compile": [False, True]},
        "on_invalid": "skip",
        "inference": {**checkpoint, "prompts": PROMPTS},
    }


def test_the_grid_over_layout_and_compile_makes_four_runs_on_the_chosen_checkpoint(client, session, tmp_path):
    trained = trained_row(session, tmp_path / "trained")
    response = client.post("/api/experiments/preview", json=inference_request({"checkpoint_run": trained.id}))
    assert response.status_code == 200, response.text
    preview = response.json()
    layouts = [(run["strategy"], run["gpus"], run["compile"]) for run in preview["runs"]]
    assert layouts == [("single", 1, False), ("single", 1, True), ("tp", 2, False), ("tp", 2, True)]
    assert {run["checkpoint"] for run in preview["runs"]} == {str(tmp_path / "trained")}
    assert [item["combination"] for item in preview["skipped"]] == [
        {"strategy": "single", "gpus": 2, "compile": False},
        {"strategy": "single", "gpus": 2, "compile": True},
        {"strategy": "tp", "gpus": 1, "compile": False},
        {"strategy": "tp", "gpus": 1, "compile": True},
    ]
    assert "-m worker infer --spec" in preview["script"]


def test_each_run_gets_the_prompts_file_and_an_infer_command(client, session, tmp_path):
    trained = trained_row(session, tmp_path / "trained")
    request = inference_request({"checkpoint_run": trained.id})
    request["grid"] = {"compile": [False]}
    response = client.post("/api/experiments", json=request)
    assert response.status_code == 201, response.text
    (run,) = response.json()["runs"]
    run_dir = Path(run["run_dir"])
    assert (run_dir / PROMPTS_FILE).read_text() == "def main(\nclass Foo:\n  return x\n"
    assert json.loads((run_dir / SPEC_FILE).read_text())["checkpoint"] == str(tmp_path / "trained")
    script = (run_dir / SCRIPT_FILE).read_text()
    assert "worker infer --spec" in script and "def main" not in script  # prompts never reach the script


def test_a_tensor_parallel_layout_that_does_not_divide_the_checkpoints_heads_is_refused(client, session, tmp_path):
    """The heads are the checkpoint's (its training spec), not the inference request's."""
    trained = trained_row(session, tmp_path / "trained", heads=2)
    request = inference_request({"checkpoint_run": trained.id}, strategy="tp", gpus=2)
    request["grid"] = {}
    assert client.post("/api/experiments/preview", json=request).status_code == 200
    request["base"]["gpus"] = 4  # the default gpt's 4 heads would split over 4; this checkpoint's 2 do not
    for path in ("/api/experiments/preview", "/api/experiments"):
        response = client.post(path, json=request)
        assert error_locs(response) == [("body", "base", "gpus")]
        message = response.json()["detail"][0]["msg"]
        assert f"the checkpoint's gpt (run {trained.id}) has 2 attention heads" in message, message


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        ({"inference": None}, ("body", "inference")),
        ({"base": {"kind": "train", "model": "gpt"}}, ("body", "inference", "prompts")),
        ({"inference": {"checkpoint_run": "0123456789", "prompts": "x"}}, ("body", "inference", "checkpoint_run")),
        ({"inference": {"checkpoint_run": "not an id!", "prompts": "x"}}, ("body", "inference", "checkpoint_run")),
        ({"inference": {"checkpoint_path": "/etc", "prompts": "x"}}, ("body", "inference", "checkpoint_path")),
        ({"inference": {"prompts": "x"}}, ("body", "inference", "checkpoint_run")),
        (
            {"inference": {"checkpoint_run": "{id}", "checkpoint_path": "/x", "prompts": "x"}},
            ("body", "inference", "checkpoint_path"),
        ),
        ({"base": {"model": "gpt"}}, ("body", "inference", "checkpoint_run")),
        ({"base": {"model": "gpt"}, "inference": {}}, ("body", "base", "kind")),
        ({"inference": {"checkpoint_run": "{id}", "prompts": "\n \n"}}, ("body", "inference", "prompts")),
        ({"inference": {"checkpoint_run": "{id}", "prompts": "p\n" * 257}}, ("body", "inference", "prompts")),
        ({"inference": {"checkpoint_run": "{id}", "prompts": "x" * 70_000}}, ("body", "inference", "prompts")),
        ({"base": {"kind": "inference", "model": "gpt", "max_new_tokens": 32}}, ("body", "grid")),
        ({"base": {"kind": "inference", "model": "gpt", "checkpoint": "/etc"}}, ("body", "base", "checkpoint")),
        ({"grid": {"kind": ["train", "inference"]}}, ("body", "grid", "kind")),
    ],
)
def test_bad_inference_requests_name_their_field(client, session, tmp_path, change, loc):
    trained = trained_row(session, tmp_path / "trained")
    request = {**inference_request({"checkpoint_run": trained.id}), **change}
    if request["inference"] and request["inference"].get("checkpoint_run") == "{id}":
        request["inference"] = {**request["inference"], "checkpoint_run": trained.id}
    assert loc in error_locs(client.post("/api/experiments/preview", json=request))


@pytest.mark.parametrize(
    ("overrides", "state", "message"),
    [
        ({}, RunState.failed, "has not completed"),
        ({"model": "mlp", "dataset": "synthetic"}, RunState.completed, "is not a gpt trained on text"),
        ({"dataset": "synthetic"}, RunState.completed, "is not a gpt trained on text"),
    ],
)
def test_only_a_completed_gpt_run_on_text_is_a_checkpoint(client, session, tmp_path, overrides, state, message):
    trained = trained_row(session, tmp_path / "trained", **overrides)
    trained.state = state
    session.add(trained)
    session.commit()
    response = client.post("/api/experiments/preview", json=inference_request({"checkpoint_run": trained.id}))
    assert ("body", "inference", "checkpoint_run") in error_locs(response)
    assert message in response.text


def test_a_run_without_a_checkpoint_is_refused(client, session, tmp_path):
    trained = trained_row(session, tmp_path / "trained")
    (tmp_path / "trained" / CHECKPOINTS_DIR / "epoch-1").rmdir()
    response = client.post("/api/experiments/preview", json=inference_request({"checkpoint_run": trained.id}))
    assert "saved no checkpoint" in response.text and response.status_code == 422


def test_a_checkpoint_path_only_under_the_profiles_roots(settings, local_scheduler, session, tmp_path):
    trained_row(session, tmp_path / "shared" / "trained")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    text = (Path(__file__).parents[3] / "server" / "cluster_profiles" / "local.toml").read_text()
    (profiles / "local.toml").write_text(f'checkpoint_roots = ["{tmp_path / "shared"}"]\n' + text)
    with make_client(settings.model_copy(update={"profiles_dir": profiles}), local_scheduler) as client:
        inside = inference_request({"checkpoint_path": str(tmp_path / "shared" / "trained")})
        response = client.post("/api/experiments/preview", json=inside)
        assert response.status_code == 200, response.text
        assert response.json()["runs"][0]["checkpoint"] == str(tmp_path / "shared" / "trained")
        # A link out of the root does not get out of it.
        (tmp_path / "shared" / "escape").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
        trained_row(session, tmp_path / "elsewhere")
        outside = inference_request({"checkpoint_path": str(tmp_path / "shared" / "escape")})
        assert ("body", "inference", "checkpoint_path") in error_locs(
            client.post("/api/experiments/preview", json=outside)
        )


def _inference_run(session: Session, run_dir: Path, **fields: Any) -> Run:
    run_dir.mkdir(parents=True)
    run_spec = spec(kind="inference", model="gpt", checkpoint="/somewhere", **fields)
    return run_row(session, experiment_row(session), run_dir, run_spec=run_spec, state=RunState.completed)


def test_generations_of_an_inference_run(client, session, tmp_path):
    run = _inference_run(session, tmp_path / "run")
    body = client.get(f"/api/runs/{run.id}/generations").json()
    assert (body["count"], body["complete"]) == (0, False)
    rows = [
        {"index": i, "prompt": f"p{i}", "completion": "é\n<b>", "prompt_tokens": 2, "new_tokens": 4} for i in range(3)
    ]
    (tmp_path / "run" / GENERATIONS_FILE).write_text("".join(json.dumps(row) + "\n" for row in rows))
    body = client.get(f"/api/runs/{run.id}/generations").json()
    assert (body["data"], body["count"], body["complete"]) == (rows, 3, True)


def test_generations_only_from_the_runs_own_file(client, session, tmp_path):
    run = _inference_run(session, tmp_path / "run")
    (tmp_path / "secret.jsonl").write_text(
        '{"index": 0, "prompt": "s", "completion": "s", "prompt_tokens": 1, "new_tokens": 1}\n'
    )
    (tmp_path / "run" / GENERATIONS_FILE).symlink_to(tmp_path / "secret.jsonl")
    response = client.get(f"/api/runs/{run.id}/generations")
    assert response.status_code == 404 and "not a file in its directory" in response.text
    training = run_row(session, experiment_row(session), tmp_path / "train")
    assert client.get(f"/api/runs/{training.id}/generations").status_code == 404
    assert client.get("/api/runs/nosuchrun/generations").status_code == 404


def _records(tp: int, compile_on: bool) -> list[str]:
    start = StartRecord(
        world_size=tp, nodes=1, device="cpu", backend="gloo", strategy="tp", torch_version="2", hostname="h"
    )
    request = RequestRecord(index=0, prompt_tokens=3, new_tokens=8, ttft_s=0.01, tokens_per_s=90.0)
    memory = [
        MemoryRecord(epoch=0, rank=rank, peak_allocated_bytes=1000 + rank, memory_kind="cpu_max_rss")
        for rank in range(tp)
    ]
    result = InferenceRecord(
        tp=tp, compile=compile_on, precision="fp32", batch_size=2, requests=3, new_tokens=24, load_time_s=0.5,
        compile_time_s=30.0 if compile_on else None, ttft_s=0.01, ttft_p50_s=0.01, tokens_per_s=100.0 * tp,
        request_tokens_per_s=90.0, latency_p50_s=0.002, latency_p95_s=0.004, generation_time_s=0.3,
        peak_memory_bytes=1000 + tp - 1, memory_kind="cpu_max_rss",
    )  # fmt: skip
    end = EndRecord(status="completed", total_time_s=1.0)
    records: list[WorkerRecord] = [start, request, *memory, result, end]
    return [format_record(record) for record in records]


def test_inference_records_are_ingested_and_compared_per_layout(client, session, tmp_path):
    experiment = experiment_row(session)
    runs = []
    for position, (tp, compile_on) in enumerate([(1, False), (2, True)]):
        strategy = "tp" if tp > 1 else "single"
        fields = {"kind": "inference", "model": "gpt", "checkpoint": "/c", "strategy": strategy, "gpus": tp}
        run_spec = spec(**fields, compile=compile_on)
        run = run_row(session, experiment, tmp_path / str(position), run_spec=run_spec, position=position)
        (tmp_path / str(position)).mkdir()
        (tmp_path / str(position) / OUTPUT_FILE).write_text("\n".join(_records(tp, compile_on)) + "\n")
        ingest(session, run)
        session.commit()
        runs.append(run)
    training = run_row(session, experiment, tmp_path / "t", position=2)
    body = client.get(f"/api/experiments/{experiment.id}/inference").json()
    assert body["count"] == 2 and training.id not in {row["run_id"] for row in body["data"]}
    single, tensor_parallel = body["data"]
    assert (single["tp"], single["compile"], single["tokens_per_s"], single["compile_time_s"]) == (
        1,
        False,
        100.0,
        None,
    )
    assert (tensor_parallel["tp"], tensor_parallel["compile"], tensor_parallel["compile_time_s"]) == (2, True, 30.0)
    assert tensor_parallel["memory_per_rank"] == [1000, 1001]
    assert (tensor_parallel["latency_p50_s"], tensor_parallel["latency_p95_s"]) == (0.002, 0.004)
    kinds = [record["kind"] for record in client.get(f"/api/runs/{runs[1].id}/metrics").json()["data"]]
    assert kinds == ["start", "request", "memory", "memory", "inference", "end"]
    # The runs are still live (submitted): their figures may grow, which the page follows by ingest_done.
    assert {row["ingest_done"] for row in body["data"]} == {False}
    runs[0].state, runs[0].ingest_done = RunState.completed, True
    session.add(runs[0])
    session.commit()
    rows = client.get(f"/api/experiments/{experiment.id}/inference").json()["data"]
    assert [row["ingest_done"] for row in rows] == [True, False]


class JobsAsTheirUsers(LocalScheduler):
    """What matters here of a scheduler whose jobs run as their users (slurmrestd): whose files a job can read."""

    runs_as_user = True


def test_where_jobs_run_as_their_users_only_the_owner_generates_from_a_checkpoint(settings, session, tmp_path):
    users.add_user(session, "alice")
    trained = trained_row(session, tmp_path / "alices")
    trained.owner = "alice"
    session.add(trained)
    session.commit()
    request = inference_request({"checkpoint_run": trained.id})
    settings.runs_dir.mkdir()
    settings.runs_dir.chmod(0o3733)  # as a shared instance's runs directory must be (the server checks at start)
    with make_client(settings, JobsAsTheirUsers(settings.runs_dir / ".local-jobs")) as client:
        # The admin may see alice's run, but a job of the admin's could not read her files.
        response = client.post("/api/experiments/preview", json=request)
        assert response.status_code == 422
        problem = response.json()["detail"][0]
        assert tuple(problem["loc"]) == ("body", "inference", "checkpoint_run")
        assert "alice's" in problem["msg"] and "run as their users" in problem["msg"]
    # Where jobs run as the service, the service reads every run's checkpoint.
    with local_client(settings) as client:
        assert client.post("/api/experiments/preview", json=request).status_code == 200
