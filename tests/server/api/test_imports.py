"""Importing logs of runs made outside scalelab: one finished run per file, all files or none."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from sqlmodel import Session, select

from contract.records import EndRecord, EpochRecord, StartRecord, format_record
from server.models import Metric, Run
from tests.conftest import make_client
from tests.factories import course_log
from tests.server.api.test_experiments import counts, error_locs


def files(*logs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "content": content} for name, content in logs]


def worker_log(world_size: int, *, status: str = "completed", error: str | None = None) -> str:
    """What the scalelab worker prints, as an old run directory would hold it."""
    start = StartRecord(
        world_size=world_size, nodes=1, device="cpu", backend="gloo", strategy="ddp", torch_version="2", hostname="h"
    )
    epoch = EpochRecord(epoch=1, train_loss=0.5, val_loss=0.6, val_accuracy=0.8, epoch_time_s=3.0, samples_per_s=99.0)
    end = EndRecord.model_validate({"status": status, "total_time_s": 3.5, "error": error})
    return "\n".join(["some torch warning", format_record(start), format_record(epoch), format_record(end)]) + "\n"


def test_course_logs_become_an_experiment_of_finished_runs(client, settings):
    logs = [("run_1gpu.out", course_log(1)), ("run_4gpus.out", course_log(4))]
    response = client.post("/api/imports", json={"name": "spring course", "files": files(*logs)})
    assert response.status_code == 201, response.text
    created = response.json()
    assert (created["name"], created["run_count"], created["states"]) == ("spring course", 2, {"completed": 2})
    assert created["request"]["files"] == ["run_1gpu.out", "run_4gpus.out"]
    runs = created["runs"]
    assert [run["spec"]["gpus"] for run in runs] == [1, 4]
    assert all(run["scheduler"] == "import" and run["ingest_done"] and run["job_id"] is None for run in runs)
    assert all(run["origin"] == "imported" for run in runs)
    assert runs[1]["spec"]["strategy"] == "ddp" and runs[1]["spec"]["epochs"] == 2

    # The experiment appears beside submitted ones, and compares like them.
    listed = client.get("/api/experiments").json()["data"]
    assert [experiment["id"] for experiment in listed] == [created["id"]]
    rows = client.get(f"/api/experiments/{created['id']}/compare").json()["data"]
    assert [row["epochs_done"] for row in rows] == [2, 2]
    assert rows[0]["mean_epoch_time_s"] == pytest.approx(4.0)
    assert rows[1]["speedup"] == pytest.approx(4.0)
    assert rows[1]["final_val_accuracy"] == pytest.approx(0.7)

    metrics = client.get(f"/api/runs/{runs[0]['id']}/metrics").json()["data"]
    assert [record["kind"] for record in metrics] == ["legacy", "epoch", "epoch"]
    assert metrics[1]["train_loss"] == pytest.approx(0.5)

    # The log is kept in the run's own directory, so it reads like any run's.
    for run, (_, content) in zip(runs, logs, strict=True):
        assert run["run_dir"] == str(settings.runs_dir / run["id"])
        log = client.get(f"/api/runs/{run['id']}/log").json()
        assert (log["text"], log["complete"]) == (content, True)
        # Only the service reads an imported run: nothing of it for other users of a shared runs directory.
        run_dir = Path(run["run_dir"])
        assert [stat.S_IMODE(path.stat().st_mode) & 0o007 for path in (run_dir, *run_dir.iterdir())] == [0, 0, 0]


def test_worker_logs_keep_their_records_and_outcome(client):
    request = {
        "name": "old scalelab runs",
        "files": files(
            ("good.out", worker_log(2)), ("bad.out", worker_log(2, status="failed", error="CUDA out of memory"))
        ),
    }
    created = client.post("/api/imports", json=request).json()
    good, bad = created["runs"]
    assert (good["state"], bad["state"]) == ("completed", "failed")
    assert bad["message"] == "the worker reported: CUDA out of memory"
    assert good["spec"]["gpus"] == 2
    kinds = [record["kind"] for record in client.get(f"/api/runs/{good['id']}/metrics").json()["data"]]
    assert kinds == ["start", "epoch", "end"]


def test_a_log_without_a_final_newline_is_read_whole(client):
    content = course_log(2).rstrip("\n")
    created = client.post("/api/imports", json={"name": "x", "files": files(("a.out", content))}).json()
    assert client.get(f"/api/experiments/{created['id']}/compare").json()["data"][0]["epochs_done"] == 2


def test_unreadable_files_are_each_named_and_nothing_is_imported(client, settings):
    request = {
        "name": "half broken",
        "files": files(
            ("good.out", course_log(1)),
            ("prose.out", "no metrics here\njust prose\n"),
            ("broken.out", course_log(2) + "[METRIC] epoch=3 loss=nan? time=1\n[METRIC] {not json\n"),
            ("empty.out", ""),
        ),
    }
    response = client.post("/api/imports", json=request)
    assert error_locs(response) == [("body", "files", index, "content") for index in (1, 2, 3)]
    messages = [error["msg"] for error in response.json()["detail"]]
    assert messages[0] == "prose.out: no [METRIC] records"
    assert messages[1].startswith("broken.out: unreadable metric lines: line 8: ")
    assert "line 9: invalid JSON" in messages[1]
    assert messages[2] == "empty.out: no [METRIC] records"
    assert counts(client) == (0, 0)
    assert not settings.runs_dir.exists() or not any(settings.runs_dir.iterdir())


def test_a_setup_scalelab_cannot_describe_is_refused_by_name(client):
    request = {"name": "x", "files": files(("zigzag.out", course_log(2, strategy="zigzag")), ("ok.out", course_log(2)))}
    response = client.post("/api/imports", json=request)
    assert error_locs(response) == [("body", "files", 0, "content")]
    message = response.json()["detail"][0]["msg"]
    assert message.startswith("zigzag.out: the run it describes is not one scalelab can hold: strategy: ")
    assert counts(client) == (0, 0)


def test_a_process_count_the_default_batch_does_not_divide_still_imports(client):
    created = client.post("/api/imports", json={"name": "x", "files": files(("three.out", course_log(3)))}).json()
    spec = created["runs"][0]["spec"]
    assert spec["gpus"] == 3
    assert spec["global_batch_size"] % 3 == 0


@pytest.mark.parametrize(
    ("request_body", "loc"),
    [
        ({"name": "x", "files": []}, ("body", "files")),
        ({"name": "", "files": files(("a.out", course_log(1)))}, ("body", "name")),
        (
            {"name": "x", "files": [{"name": "../../etc/passwd", "content": course_log(1)}]},
            ("body", "files", 0, "name"),
        ),
        ({"name": "x", "files": [{"name": "a\nb", "content": course_log(1)}]}, ("body", "files", 0, "name")),
        ({"name": "x", "files": [{"name": "a.out"}]}, ("body", "files", 0, "content")),
        ({"name": "x", "files": files(("a.out", course_log(1))) * 2}, ("body", "files")),
        ({"name": "x", "files": files(("a.out", course_log(1))), "scheduler": "slurm"}, ("body", "scheduler")),
    ],
)
def test_invalid_requests_are_422_and_create_nothing(client, request_body, loc):
    assert loc in error_locs(client.post("/api/imports", json=request_body))
    assert counts(client) == (0, 0)


def test_the_monitor_leaves_imported_runs_alone(client):
    created = client.post("/api/imports", json={"name": "x", "files": files(("a.out", course_log(2)))}).json()
    client.app.state.monitor.cycle()
    with Session(client.app.state.engine) as session:
        run = session.exec(select(Run)).one()
        assert (run.state, run.ingest_done, run.parse_errors) == ("completed", True, 0)
        assert len(session.exec(select(Metric)).all()) == 3
    assert client.get(f"/api/experiments/{created['id']}").json()["states"] == {"completed": 1}


def test_an_unwritable_runs_directory_keeps_nothing(settings, local_scheduler):
    settings.runs_dir.parent.mkdir(parents=True, exist_ok=True)
    settings.runs_dir.write_text("a file where the runs directory should be")
    with make_client(settings, local_scheduler) as client:
        response = client.post("/api/imports", json={"name": "x", "files": files(("a.out", course_log(1)))})
        assert response.status_code == 507
        assert "nothing was imported" in response.json()["detail"]
        assert counts(client) == (0, 0)
