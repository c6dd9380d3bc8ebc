"""Runs: listing with filters and pagination, reading the output log, cancelling; over rows made in the database."""

from __future__ import annotations

import json
import time

import pytest

from contract.records import EpochRecord, ResumeRecord, StartRecord, format_record
from contract.rundir import OUTPUT_FILE
from contract.spec import RunSpec
from contract.states import RunState
from server.services.ingestion.parsing import ingest
from tests.factories import experiment_row, run_row, spec


def seed(session, tmp_path):
    first, second = experiment_row(session, "first"), experiment_row(session, "second")
    for position, state in enumerate([RunState.pending, RunState.running, RunState.completed]):
        run_row(session, first, tmp_path / f"a{position}", state=state, position=position)
    for position in range(2):
        run_row(session, second, tmp_path / f"b{position}", state=RunState.failed, position=position)
    return first, second


def resumed_output(run_dir) -> None:
    """Epochs 1-3, then a restart resumed from epoch 2's checkpoint and epochs 3-4: the first epoch 3 is superseded."""
    start = format_record(StartRecord(world_size=1, nodes=1, strategy="single"))
    lines = [start, *(epoch(n, time_s) for n, time_s in [(1, 5.0), (2, 2.0), (3, 9.0)])]
    lines += [start, format_record(ResumeRecord(epoch=2)), epoch(3, 3.0), epoch(4, 4.0)]
    (run_dir / OUTPUT_FILE).write_text("\n".join(lines) + "\n")


def epoch(n: int, time_s: float) -> str:
    return format_record(EpochRecord(epoch=n, train_loss=1.0 / n, epoch_time_s=time_s))


def test_metrics_are_the_records_that_count_and_the_whole_history_on_request(client, session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path)
    resumed_output(tmp_path)
    ingest(session, run)
    session.commit()
    metrics = f"/api/runs/{run.id}/metrics"

    effective = client.get(metrics, params={"kind": "epoch"}).json()
    assert [(record["epoch"], record["epoch_time_s"]) for record in effective["data"]] == [
        (1, 5.0), (2, 2.0), (3, 3.0), (4, 4.0)
    ]  # fmt: skip
    assert effective["count"] == 4
    assert [record["kind"] for record in client.get(metrics).json()["data"]] == [
        "start", "epoch", "epoch", "start", "resume", "epoch", "epoch"
    ]  # fmt: skip

    whole = client.get(metrics, params={"kind": "epoch", "history": "true"}).json()
    assert [(record["epoch"], record["epoch_time_s"], record["superseded"]) for record in whole["data"]] == [
        (1, 5.0, False), (2, 2.0, False), (3, 9.0, True), (3, 3.0, False), (4, 4.0, False)
    ]  # fmt: skip
    assert whole["count"] == 5
    paged = client.get(metrics, params={"kind": "epoch", "history": "true", "skip": 2, "limit": 1}).json()
    assert [(record["epoch"], record["superseded"]) for record in paged["data"]] == [(3, True)]

    operation = client.get("/openapi.json").json()["paths"]["/api/runs/{run_id}/metrics"]["get"]
    (history,) = [parameter for parameter in operation["parameters"] if parameter["name"] == "history"]
    assert "superseded" in history["description"]


def test_filter_by_experiment_and_state(client, session, tmp_path):
    first, _second = seed(session, tmp_path)
    assert client.get("/api/runs").json()["count"] == 5
    assert client.get(f"/api/runs?experiment_id={first.id}").json()["count"] == 3
    body = client.get(f"/api/runs?experiment_id={first.id}&state=running&state=completed").json()
    assert sorted(run["state"] for run in body["data"]) == ["completed", "running"]
    assert client.get("/api/runs?state=failed").json()["count"] == 2


def test_filter_by_model_and_strategy(client, session, tmp_path):
    experiment = experiment_row(session)
    for position, (model, strategy) in enumerate([("mlp", "ddp"), ("cnn", "ddp"), ("cnn", "fsdp")]):
        run_spec = spec(model=model, strategy=strategy)
        run_row(session, experiment, tmp_path / str(position), run_spec=run_spec, position=position)
    assert client.get("/api/runs?model=cnn").json()["count"] == 2
    body = client.get("/api/runs?model=cnn&strategy=ddp").json()
    assert [(run["spec"]["model"], run["spec"]["strategy"]) for run in body["data"]] == [("cnn", "ddp")]
    response = client.get("/api/runs?strategy=zero")
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "strategy"]


def test_pagination_keeps_the_total(client, session, tmp_path):
    seed(session, tmp_path)
    page = client.get("/api/runs?limit=2&skip=1").json()
    assert (len(page["data"]), page["count"]) == (2, 5)
    ids = [run["id"] for run in client.get("/api/runs?limit=5").json()["data"]]
    assert len(set(ids)) == 5


def test_bad_filters_are_422(client):
    assert client.get("/api/runs?state=sleeping").status_code == 422
    assert client.get("/api/runs?limit=0").status_code == 422
    assert client.get("/api/runs?skip=-1").status_code == 422


def test_experiments_list_counts_states(client, session, tmp_path):
    _first, _ = seed(session, tmp_path)
    listed = {e["name"]: e for e in client.get("/api/experiments").json()["data"]}
    assert listed["first"]["run_count"] == 3
    assert listed["first"]["states"] == {"pending": 1, "running": 1, "completed": 1}
    assert listed["second"]["states"] == {"failed": 2}


def test_index_page_lists_experiments(client, session, tmp_path):
    seed(session, tmp_path)
    page = client.get("/")
    assert page.status_code == 200
    assert "first" in page.text and "second" in page.text
    assert 'href="/docs"' in page.text


def test_index_page_escapes_names(client, session):
    from tests.factories import experiment_row

    experiment_row(session, "<script>alert(1)</script>")
    page = client.get("/")
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;" in page.text


# ---- the output log ----------------------------------------------------------------------------------------------


def run_with_output(session, tmp_path, content: bytes, state: RunState = RunState.running):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / OUTPUT_FILE).write_bytes(content)
    return run_row(session, experiment_row(session), run_dir, state=state)


def test_log_reads_from_an_offset_until_the_ended_run_is_read(client, session, tmp_path):
    run = run_with_output(session, tmp_path, b"epoch 1\n")
    first = client.get(f"/api/runs/{run.id}/log").json()
    assert (first["text"], first["offset"], first["next_offset"], first["size"]) == ("epoch 1\n", 0, 8, 8)
    assert first["complete"] is False  # still running: more may come

    with (tmp_path / "run" / OUTPUT_FILE).open("ab") as handle:
        handle.write(b"epoch 2\n")
    run.state = RunState.completed
    session.add(run)
    session.commit()
    second = client.get(f"/api/runs/{run.id}/log", params={"offset": first["next_offset"]}).json()
    assert (second["text"], second["next_offset"], second["complete"]) == ("epoch 2\n", 16, True)


def test_log_is_bounded_and_never_splits_a_character(client, session, tmp_path):
    text = "x" * 1023 + "é" + "rest"  # the é's two bytes straddle the first 1024
    run = run_with_output(session, tmp_path, text.encode(), state=RunState.completed)
    first = client.get(f"/api/runs/{run.id}/log", params={"limit": 1024}).json()
    assert (first["text"], first["next_offset"], first["complete"]) == ("x" * 1023, 1023, False)
    second = client.get(f"/api/runs/{run.id}/log", params={"offset": 1023, "limit": 1024}).json()
    assert (second["text"], second["complete"]) == ("érest", True)


def test_log_of_a_run_that_has_not_started_is_empty(client, session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path / "never-made", state=RunState.pending)
    body = client.get(f"/api/runs/{run.id}/log").json()
    assert (body["text"], body["size"], body["complete"]) == ("", 0, False)


@pytest.mark.parametrize(
    ("params", "status"),
    [({"offset": -1}, 422), ({"offset": 9}, 416), ({"limit": 0}, 422), ({"limit": 2 * 1024 * 1024}, 422)],
)
def test_log_refuses_bad_ranges(client, session, tmp_path, params, status):
    run = run_with_output(session, tmp_path, b"epoch 1\n")
    assert client.get(f"/api/runs/{run.id}/log", params=params).status_code == status


@pytest.mark.parametrize("run_id", ["..%2F..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "..", "nope"])
def test_log_path_traversal_in_the_id_finds_no_run(client, run_id):
    response = client.get(f"/api/runs/{run_id}/log")
    assert response.status_code == 404
    assert "root:" not in response.text


def test_log_never_follows_a_link_out_of_the_run_directory(client, session, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / OUTPUT_FILE).symlink_to(secret)
    run = run_row(session, experiment_row(session), run_dir)
    response = client.get(f"/api/runs/{run.id}/log")
    assert response.status_code == 404
    assert "root:" not in response.text
    assert "not a file in its directory" in response.json()["detail"]


# ---- cancelling --------------------------------------------------------------------------------------------------


def sleeping_job(session, tmp_path, scheduler):
    run_dir = tmp_path / "job"
    run_dir.mkdir()
    script = run_dir / "job.sbatch"
    script.write_text("#!/bin/bash\nsleep 60\n")
    job_id = scheduler.submit(script, run_dir)
    return run_row(session, experiment_row(session), run_dir, job_id=job_id, scheduler=scheduler.name)


def until_final(client, run_id: str):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        client.app.state.monitor.cycle()
        run = client.get(f"/api/runs/{run_id}").json()
        if RunState(run["state"]).is_final:
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not end")


def test_cancel_stops_the_job_and_the_monitor_sees_it_cancelled(client, session, tmp_path, local_scheduler):
    run = sleeping_job(session, tmp_path, local_scheduler)
    response = client.post(f"/api/runs/{run.id}/cancel")
    assert response.status_code == 202, response.text
    assert response.json()["state"] == "submitted"  # the scheduler's word comes with the next cycle
    ended = until_final(client, run.id)
    assert (ended["state"], ended["scheduler_state"]) == ("cancelled", "CANCELLED")


def test_cancel_of_a_run_never_submitted_is_immediate(client, session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path, state=RunState.created)
    body = client.post(f"/api/runs/{run.id}/cancel").json()
    assert (body["state"], body["message"]) == ("cancelled", "cancelled before it was submitted")
    assert body["ended_at"] is not None


def test_cancel_of_an_ended_run_is_409(client, session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path, state=RunState.completed)
    response = client.post(f"/api/runs/{run.id}/cancel")
    assert response.status_code == 409
    assert response.json()["detail"] == f"run {run.id} has already ended (completed); there is nothing to cancel"
    assert client.post("/api/runs/nope/cancel").status_code == 404


def test_cancel_through_another_scheduler_is_502_and_keeps_the_run(client, session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path, job_id="123", scheduler="slurm")
    response = client.post(f"/api/runs/{run.id}/cancel")
    assert response.status_code == 502
    assert "submitted to the slurm scheduler, but this server uses local" in response.json()["detail"]
    assert client.get(f"/api/runs/{run.id}").json()["state"] == "submitted"


def test_which_code_a_program_run_started_is_read_from_its_output(client, session, tmp_path):
    workdir = tmp_path / "proj"
    workdir.mkdir()
    program = {"command": ["python", "train.py"], "workdir": str(workdir)}
    program_spec = RunSpec.model_validate({"kind": "program", "gpus": 1, "program": program})
    run = run_row(session, experiment_row(session), tmp_path, run_spec=program_spec)
    code = {"v": 1, "kind": "code", "script": {"name": "train.py", "bytes": 2, "sha256": "ab" * 32}, "files": []}
    forged = {**code, "script": {"name": "a\x07b", "bytes": 1}}  # a control character: refused, not stored
    lines = [f"[METRIC] {json.dumps(code)}", f"[METRIC] {json.dumps(forged)}"]
    (tmp_path / OUTPUT_FILE).write_text("\n".join(lines) + "\n")
    ingest(session, run)
    session.commit()
    answer = client.get(f"/api/runs/{run.id}/code").json()
    assert answer["noted"] and answer["code"]["script"]["sha256"] == "ab" * 32
    assert answer["summary"].startswith("train.py sha256 abababababab")
    assert answer["now"] == "unknown" and answer["note"].startswith("cannot tell whether its code changed since")
    worker = run_row(session, experiment_row(session), tmp_path / "w")
    assert client.get(f"/api/runs/{worker.id}/code").json()["noted"] is False
    assert client.get("/api/runs/nope/code").status_code == 404
