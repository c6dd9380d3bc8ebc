"""The selection comparison: any runs and experiments side by side, with their epoch histories."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from sqlmodel import Session

from contract.records import ResumeRecord, WorkerRecord
from server.models import Experiment, Run
from tests.factories import epoch, experiment_row, printed_run, start


def scaling_run(session: Session, experiment: Experiment, run_dir: Path, gpus: int, strategy: str = "ddp") -> Run:
    """Two epochs, 8/gpus s each after a slower first one, so that speed-up is exactly the GPU ratio."""
    return printed_run(
        session, experiment, run_dir, [start(), epoch(1, 20.0), epoch(2, 8.0 / gpus)], gpus=gpus, strategy=strategy
    )


def test_a_selection_across_experiments_scales_within_itself(client, session, tmp_path):
    first, second = experiment_row(session, "a"), experiment_row(session, "b")
    one = scaling_run(session, first, tmp_path / "1", gpus=1)
    scaling_run(session, first, tmp_path / "2", gpus=2)  # not selected: the selection's baseline is `one`
    four = scaling_run(session, second, tmp_path / "4", gpus=4)
    fsdp = scaling_run(session, second, tmp_path / "f", gpus=4, strategy="fsdp")

    body = client.get("/api/compare", params={"run_id": [one.id, four.id, fsdp.id]}).json()

    assert body["count"] == 3 and body["experiment_id"] is None and body["histories"] is None
    rows = {row["run_id"]: row for row in body["data"]}
    assert (rows[four.id]["speedup"], rows[four.id]["efficiency"]) == (4.0, 1.0)
    assert rows[four.id]["experiment_id"] == second.id
    # fsdp alone in its series is its own baseline.
    assert (rows[fsdp.id]["speedup"], rows[fsdp.id]["series"]) == (1.0, "fsdp")
    assert rows[one.id]["series"] == "ddp" and rows[one.id]["ingest_done"] is True


def test_whole_experiments_and_single_runs_together(client, session, tmp_path):
    first, second = experiment_row(session, "a"), experiment_row(session, "b")
    runs = [scaling_run(session, first, tmp_path / str(g), gpus=g) for g in (1, 2)]
    other = scaling_run(session, second, tmp_path / "x", gpus=8)
    body = client.get("/api/compare", params={"experiment_id": first.id, "run_id": other.id}).json()
    assert [row["run_id"] for row in body["data"]] == [runs[0].id, runs[1].id, other.id]
    assert body["data"][2]["speedup"] == 8.0
    alone = client.get("/api/compare", params={"experiment_id": first.id}).json()
    assert alone["experiment_id"] == first.id and alone["count"] == 2


def test_series_are_named_by_what_tells_them_apart(client, session, tmp_path):
    experiment = experiment_row(session)
    small = printed_run(session, experiment, tmp_path / "s", [start()], global_batch_size=64)
    large = printed_run(session, experiment, tmp_path / "l", [start()], global_batch_size=128)
    body = client.get("/api/compare", params={"experiment_id": experiment.id}).json()
    names = {row["run_id"]: row["series"] for row in body["data"]}
    assert names == {small.id: "ddp, global_batch_size=64", large.id: "ddp, global_batch_size=128"}


def test_histories_follow_restarts_and_resumes_as_ingestion_does(client, session, tmp_path):
    experiment = experiment_row(session)
    # Epochs 1-3, then a requeue: a new start, a resume from epoch 1's checkpoint, epochs 2-3 again.
    records: list[WorkerRecord] = [start(), epoch(1, 5, loss=3), epoch(2, 5, loss=2), epoch(3, 5, loss=1.5)]
    records += [start(), ResumeRecord(epoch=1), epoch(2, 4, loss=1.9)]
    resumed = printed_run(session, experiment, tmp_path / "r", records)
    plain = scaling_run(session, experiment, tmp_path / "p", gpus=2)

    body = client.get("/api/compare", params={"run_id": [resumed.id, plain.id], "history": "true"}).json()

    history = body["histories"][resumed.id]
    assert [(point["epoch"], point["train_loss"]) for point in history] == [(1, 3.0), (2, 1.9)]
    assert [point["epoch_time_s"] for point in body["histories"][plain.id]] == [20.0, 4.0]
    # The figures and the history agree on how many epochs count.
    assert {row["run_id"]: row["epochs_done"] for row in body["data"]} == {resumed.id: 2, plain.id: 2}


def test_rows_and_histories_agree_on_a_repeated_epoch_and_a_restart(client, session, tmp_path):
    """The same epoch printed twice counts once, and a start with no resume after it leaves no epoch, in the row's
    figures as in the history: both read the verdicts ingestion stored."""
    experiment = experiment_row(session)
    repeated = printed_run(
        session, experiment, tmp_path / "r", [start(), epoch(1, 20.0), epoch(2, 9.0, loss=2), epoch(2, 3.0, loss=1)]
    )
    restarted = printed_run(session, experiment, tmp_path / "s", [start(), epoch(1, 20.0), epoch(2, 3.0), start()])

    body = client.get("/api/compare", params={"run_id": [repeated.id, restarted.id], "history": "true"}).json()

    points = [(point["epoch"], point["epoch_time_s"], point["train_loss"]) for point in body["histories"][repeated.id]]
    assert points == [(1, 20.0, 1.0), (2, 3.0, 1.0)]
    assert body["histories"][restarted.id] == []
    rows = {row["run_id"]: (row["epochs_done"], row["mean_epoch_time_s"]) for row in body["data"]}
    assert rows == {repeated.id: (2, 3.0), restarted.id: (0, None)}


def test_csv_of_a_selection_matches_its_json(client, session, tmp_path):
    experiment = experiment_row(session)
    runs = [scaling_run(session, experiment, tmp_path / str(g), gpus=g) for g in (1, 4)]
    params = {"run_id": [run.id for run in runs]}
    response = client.get("/api/compare.csv", params=params)
    assert response.status_code == 200
    assert 'filename="scalelab-selection.csv"' in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    json_rows = client.get("/api/compare", params=params).json()["data"]
    # The same fields in the same order; a nested one (time breakdown, resources) a column per part; the custom
    # metrics a column each, of which these runs have none.
    assert list(dict.fromkeys(column.split(".")[0] for column in rows[0])) == [
        name for name in json_rows[0] if name != "metrics"
    ]
    assert [(row["gpus"], row["speedup"]) for row in rows] == [("1", "1.0"), ("4", "4.0")]


def test_an_empty_selection_is_refused_naming_the_parameter(client):
    response = client.get("/api/compare")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "run_id"]


def test_unknown_runs_and_experiments_are_named(client, session, tmp_path):
    experiment = experiment_row(session)
    run = scaling_run(session, experiment, tmp_path / "1", gpus=1)
    response = client.get("/api/compare", params={"run_id": [run.id, "nope"]})
    assert response.status_code == 422
    assert response.json()["detail"] == [{"type": "value_error", "loc": ["query", "run_id"], "msg": "no run 'nope'"}]
    response = client.get("/api/compare.csv", params={"experiment_id": "gone"})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "experiment_id"]


def test_too_many_runs_are_refused(client):
    response = client.get("/api/compare", params={"run_id": [f"r{i}" for i in range(501)]})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "run_id"]


def test_a_course_log_without_validation_figures_has_a_history(client):
    """Course scripts print `epoch=1 loss=0.41 time=4.8`: no validation loss or accuracy in the epoch's record."""
    log = "[METRIC] gpus=2 strategy=ddp\n[METRIC] epoch=1 loss=0.41 time=4.8\n[METRIC] epoch=2 loss=0.30 time=4.1\n"
    created = client.post("/api/imports", json={"name": "course", "files": [{"name": "a.out", "content": log}]})
    assert created.status_code == 201, created.text
    response = client.get("/api/compare", params={"experiment_id": created.json()["id"], "history": "true"})
    assert response.status_code == 200, response.text
    (history,) = response.json()["histories"].values()
    assert [(point["epoch"], point["val_loss"]) for point in history] == [(1, None), (2, None)]


def test_time_to_target_is_in_the_rows_the_csv_and_the_scaling(client, session, tmp_path):
    experiment = experiment_row(session)
    target = {"metric": "val_accuracy", "at_least": 0.9}
    for gpus, seconds in ((1, 4.0), (2, 2.0)):
        records: list[WorkerRecord] = [
            start(),
            *(epoch(n, seconds, val_accuracy=a) for n, a in enumerate([0.5, 0.8, 0.95, 0.96], 1)),
        ]
        printed_run(session, experiment, tmp_path / str(gpus), records, gpus=gpus, epochs=4, target=target)
    rows = client.get("/api/compare", params={"experiment_id": experiment.id}).json()["data"]
    assert [(row["target_reached"], row["epochs_to_target"], row["time_to_target_s"]) for row in rows] == [
        (True, 3, 12.0),
        (True, 3, 6.0),
    ]
    assert rows[1]["effective_speedup"] == 2.0 and rows[1]["target"] == {**target, "at_most": None}
    table = list(csv.DictReader(io.StringIO(client.get(f"/api/experiments/{experiment.id}/compare.csv").text)))
    assert (table[1]["time_to_target_s"], table[1]["target"]) == ("6.0", "val_accuracy >= 0.9")
    ttt = client.get(f"/api/experiments/{experiment.id}/scaling").json()["series"][0]["time_to_target"]
    assert ttt["baseline_gpus"] == 1 and ttt["target"]["metric"] == "val_accuracy"
    assert [(p["gpus"], p["time_to_target_s"], p["effective_speedup"]) for p in ttt["points"]] == [
        (1, 12.0, 1.0),
        (2, 6.0, 2.0),
    ]
    assert "run_time_s" in ttt["measured_from"] and "2 GPUs reach val_accuracy >= 0.9 in 6 s" in ttt["summary"]
    selected = client.get("/api/scaling", params={"experiment_id": experiment.id}).json()
    assert selected["series"][0]["time_to_target"] == ttt
