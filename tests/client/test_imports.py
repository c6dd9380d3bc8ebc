"""scalelab import against the app in-process, and reading what it made with the other commands."""

from __future__ import annotations

import csv
import io
import json

import httpx
import pytest

from client import cli
from contract.limits import MAX_IMPORT_FILE_CHARS
from tests.client.helpers import answering, scalelab
from tests.factories import course_log
from tests.server.api.test_experiments import counts


def test_import_then_list_show_log_export_and_watch(client, capsys, logdir):
    code, out, _ = scalelab(client, capsys, "import", str(logdir), "--name", "spring course")
    assert code == cli.EXIT_OK, out
    assert out.startswith("imported 3 logs as experiment ")
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[2:]] == ["run_1gpus.out", "run_2gpus.out", "run_16gpus.out"]
    experiment = client.get("/api/experiments").json()["data"][0]
    assert (experiment["name"], experiment["states"]) == ("spring course", {"completed": 3})
    runs = client.get(f"/api/runs?experiment_id={experiment['id']}").json()["data"]
    first = min(runs, key=lambda run: run["position"])

    code, out, _ = scalelab(client, capsys, "ls")
    assert code == 0 and experiment["id"] in out and "3 completed" in out

    code, out, _ = scalelab(client, capsys, "ls", experiment["id"])
    listed = [line.split()[0] for line in out.splitlines()[1:]]
    assert (code, listed) == (0, [run["id"] for run in sorted(runs, key=lambda run: run["position"])])

    code, out, _ = scalelab(client, capsys, "show", first["id"])
    assert code == 0
    assert "last epoch" in out and "2 of 2" in out and "train loss" in out
    assert "scheduler" in out and "import" in out

    code, out, _ = scalelab(client, capsys, "logs", first["id"])
    assert (code, out) == (0, course_log(1))

    code, out, _ = scalelab(client, capsys, "export", experiment["id"], "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [row["gpus"] for row in rows] == ["1", "2", "16"]
    code, out, _ = scalelab(client, capsys, "export", experiment["id"], "--json")
    assert [row["gpus"] for row in json.loads(out)["data"]] == [1, 2, 16]

    code, out, _ = scalelab(client, capsys, "watch", experiment["id"])
    assert code == cli.EXIT_OK
    assert out.count("[####################]  2/2 epochs") == 3
    assert out.endswith("all runs ended: 3 completed\n")

    code, _, err = scalelab(client, capsys, "cancel", first["id"])
    assert code == cli.EXIT_FAILED
    assert "has already ended (completed); there is nothing to cancel" in err


def test_import_names_every_unreadable_file_and_imports_nothing(client, capsys, logdir):
    (logdir / "notes.txt").write_text("no metrics in here\n")
    (logdir / "run_8gpus.out").write_bytes(b"[METRIC] epoch=1 loss=\xff time=2\n")
    code, _, err = scalelab(client, capsys, "import", str(logdir))
    assert code == cli.EXIT_USAGE
    assert "notes.txt: no [METRIC] records" in err
    assert "run_8gpus.out: unreadable metric lines: line 1: " in err
    assert "run_1gpus.out" not in err
    assert err.rstrip().endswith("nothing was imported")
    assert counts(client) == (0, 0)


def test_import_reads_only_the_files_asked_for(client, capsys, logdir):
    (logdir / "notes.txt").write_text("no metrics in here\n")
    code, out, _ = scalelab(client, capsys, "import", str(logdir), "--glob", "*.out", "-q")
    assert code == cli.EXIT_OK
    assert client.get(f"/api/experiments/{out.strip()}").json()["name"] == "imported from old-study"


@pytest.mark.parametrize(("target", "message"), [("missing", "is not a directory"), ("empty", "no files matching")])
def test_import_of_nothing_is_a_usage_error(client, capsys, tmp_path, target, message):
    (tmp_path / "empty").mkdir()
    code, _, err = scalelab(client, capsys, "import", str(tmp_path / target))
    assert code == cli.EXIT_USAGE and message in err


def test_a_log_over_the_size_the_server_takes_is_refused_before_sending(capsys, logdir):
    (logdir / "run_32gpus.out").write_text("x" * (MAX_IMPORT_FILE_CHARS + 1))
    seen: list[httpx.Request] = []
    code, _, err = scalelab(answering(201, {}, seen), capsys, "import", str(logdir))
    assert (code, seen) == (cli.EXIT_USAGE, [])
    assert err == "scalelab: error: larger than the 16 MiB a log may be: run_32gpus.out; nothing was imported\n"
