"""Imports are bounded as ingestion is (issue 30): a record ingestion would refuse (a NaN figure, nesting deeper
than any parser's stack, an integer beyond 64 bits, more records than a run may hold) is a 422 naming the file and
the line, never a 500; imported runs count toward the user's runs a day; an import is read a batch of records at a
time, so its memory does not grow with its records; and a report of a run that printed an infinite epoch time
renders."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from sqlmodel import Session, func, select

from contract.records import StepRecord, format_record
from contract.rundir import OUTPUT_FILE
from contract.states import RunState
from server.models import ImportCreate, ImportFile, Metric, User, utcnow
from server.services import users
from server.services.imports import import_logs
from server.services.ingestion import ingest_runs
from tests.factories import course_log, experiment_row, run_row, start
from tests.factories import epoch as epoch_record
from tests.server.api.test_auth import add
from tests.server.api.test_experiments import counts


def epoch_json(**fields: object) -> str:
    record = {"v": 1, "kind": "epoch", "epoch": 1, "train_loss": 0.5, "epoch_time_s": 1.0, **fields}
    return "[METRIC] " + json.dumps(record)


POISON = {
    "nan_epoch_time": (epoch_json(epoch_time_s=float("nan")), "epoch_time_s: nan is not a finite number"),
    "deep_nesting": (
        epoch_json()[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "nested more than 32 deep",
    ),
    "integer_beyond_64_bits": (epoch_json(epoch=2**63), "epoch: the integer is beyond 64 bits"),
}


@pytest.mark.parametrize("poison", sorted(POISON))
def test_an_import_of_a_poison_line_is_refused_naming_it(client, poison):
    line, reason = POISON[poison]
    before = counts(client)
    response = client.post(
        "/api/imports",
        json={"name": "old", "files": [{"name": "good.out", "content": course_log(1)}, {"name": "bad.out",
              "content": course_log(2) + line + "\n"}]},
    )  # fmt: skip
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "files", 1, "content"]
    assert error["msg"].startswith("bad.out: unreadable metric lines: line 8: ")
    assert reason in error["msg"]
    assert counts(client) == before  # nothing kept, the good file's run neither


def test_an_import_of_more_records_than_a_run_may_hold_is_refused(client, settings):
    client.app.state.settings.max_records_per_run = 3
    response = client.post("/api/imports", json={"name": "old", "files": [{"name": "a.out", "content": course_log(1,
                           epochs=3)}]})  # fmt: skip
    assert response.status_code == 422, response.text
    assert "more than 3 records, the most a run may hold" in response.json()["detail"][0]["msg"]


def test_imported_runs_count_toward_the_runs_a_day(client):
    alice = add(client, "alice", quotas=users.Quotas(max_runs_per_day=3))

    def imported(count: int):
        logs = [{"name": f"run{index}.out", "content": course_log(1)} for index in range(count)]
        return client.post("/api/imports", json={"name": "old", "files": logs}, headers=alice)

    assert imported(2).status_code == 201
    before = counts(client)
    refused = imported(2)
    assert refused.status_code == 429
    detail = refused.json()["detail"]
    assert "alice may create 3 runs in 24 hours; 2 were, and this adds 2" in detail
    assert detail.endswith("Nothing was imported.")
    assert "retry-after" in refused.headers
    assert counts(client) == before
    assert imported(1).status_code == 201


def test_the_report_of_a_run_that_printed_an_infinite_epoch_time_renders(client, session, tmp_path):
    """The infinite figure is a parse problem of its run: the report shows the run's other epochs."""
    experiment = experiment_row(session)  # an admin sees every experiment
    run = run_row(session, experiment, tmp_path, state=RunState.completed, started_at=utcnow())
    lines = [format_record(start()), epoch_json(epoch_time_s=float("inf")), format_record(epoch_record(2, 3.0))]
    (tmp_path / OUTPUT_FILE).write_text("\n".join(lines) + "\n")
    ingest_runs(client.app.state.engine, lambda _run_id: None)
    response = client.get(f"/api/experiments/{experiment.id}/report.html")
    assert response.status_code == 200, response.text[:500]
    session.refresh(run)
    assert run.parse_errors == 1 and "epoch_time_s: inf is not a finite number" in (run.first_parse_error or "")


def test_an_import_holds_a_batch_of_records_not_all_of_them(session, settings):
    """Four logs of 2 MiB (about 100,000 records in all): what the import holds at its peak, besides the request it
    was given, stays below what those records alone took when every record of every file was kept before writing
    (about 1.3 GB for the largest import), and does not grow with the number of files."""
    owner = User(name="mem")
    session.add(owner)
    session.commit()
    line = format_record(StepRecord(epoch=1, step=999_999, train_loss=0.5)) + "\n"
    file_chars = 2 * 2**20
    per_file = file_chars // len(line)
    content = "".join(line.replace("999999", str(index + 1)) for index in range(per_file))
    request = ImportCreate(name="big", files=[ImportFile(name=f"f{index}.out", content=content) for index in range(4)])

    tracemalloc.start()
    try:
        import_logs(session, request, settings, owner)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    with Session(session.get_bind()) as fresh:
        assert fresh.exec(select(func.count()).select_from(Metric)).one() == 4 * per_file
    # Each file's bytes, its copy written as the run's log, and a batch of records: a few times one file, whatever
    # the number of files (the records of all four, held whole, took about 8 times all four files' text).
    assert peak < 6 * file_chars, f"{peak / 2**20:.0f} MiB held at the peak"
