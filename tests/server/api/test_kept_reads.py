"""Reads answered from what the server keeps (server.services.read_cache): the same bytes the models would write, and
never stale: a changed run, new records or a resubmission are answered as they are now."""

from __future__ import annotations

from sqlalchemy import text
from sqlmodel import col, select

from contract.records import WorkerRecord, format_record
from contract.rundir import OUTPUT_FILE
from contract.states import RunState
from server.models import ComparePublic, Metric, MetricsPublic, Run, RunPublic, RunsPublic, User
from server.services import experiments, runs
from server.services.comparison import answers, measures
from server.services.ingestion.parsing import ingest
from server.services.read_cache import Memo, as_json
from tests.factories import epoch, experiment_row, printed_run, run_row, start


def forget_everything_kept() -> None:
    """Each memo emptied, so that an answer is made afresh from the database."""
    kept = (runs._run_json, runs._lists, runs._metrics_json, measures._figures, answers._answers)
    for memo in (*kept, experiments._listed):
        memo.clear()


def test_runs_are_answered_byte_for_byte_as_their_models_write_them(client, session, tmp_path):
    experiment = experiment_row(session)
    made = [run_row(session, experiment, tmp_path / str(i), position=i, message="é ü") for i in range(3)]
    for _ in range(2):  # made, then kept
        listed = client.get("/api/runs")
        ordered = session.exec(runs.runs_query(viewer=User(name="x", is_admin=True))).all()
        expected = RunsPublic(data=[RunPublic.model_validate(run) for run in ordered], count=3)
        assert listed.content == expected.model_dump_json().encode()
        assert listed.headers["content-type"] == "application/json"
        one = client.get(f"/api/runs/{made[1].id}")
        assert one.content == RunPublic.model_validate(made[1]).model_dump_json().encode()


def test_a_changed_run_is_answered_as_it_is_now(client, session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path, state=RunState.pending)
    assert client.get(f"/api/runs/{run.id}").json()["state"] == "pending"
    assert client.get("/api/runs").json()["data"][0]["scheduler_reason"] is None
    run.state, run.scheduler_reason = RunState.running, "None"
    session.add(run)
    session.commit()
    assert client.get(f"/api/runs/{run.id}").json()["state"] == "running"
    assert client.get("/api/runs").json()["data"][0]["scheduler_reason"] == "None"


def test_a_run_changed_outside_this_process_is_answered_as_it_is_now(client, session, tmp_path):
    """Kept answers are keyed by the row version the database bumps on every change, so a change this process did
    not make (another server process, the monitor apart, an admin's SQL) is answered as soon as it is committed."""
    run = run_row(session, experiment_row(session), tmp_path, state=RunState.pending)
    for _ in range(2):  # made, then kept
        assert client.get("/api/runs").json()["data"][0]["job_id"] is None
        assert client.get(f"/api/runs/{run.id}").json()["job_id"] is None
        assert "4242" not in client.get("/runs").text
    session.execute(text("UPDATE run SET job_id = '4242' WHERE id = :id"), {"id": run.id})
    session.commit()
    assert client.get("/api/runs").json()["data"][0]["job_id"] == "4242"
    assert client.get(f"/api/runs/{run.id}").json()["job_id"] == "4242"
    assert '<td class="job hide-narrow">4242</td>' in client.get("/runs").text


def test_a_run_no_longer_seen_is_not_found_although_its_answer_was_kept(client, session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path, state=RunState.failed)
    assert client.get(f"/api/runs/{run.id}").status_code == 200
    assert client.delete(f"/api/runs/{run.id}").status_code == 204
    assert client.get(f"/api/runs/{run.id}").status_code == 404
    assert client.get(f"/api/runs/{run.id}/metrics").status_code == 404


def test_a_finished_runs_records_and_figures_follow_a_resubmission(client, session, tmp_path):
    experiment = experiment_row(session)
    run = printed_run(session, experiment, tmp_path / "r", [start(), epoch(1, 5.0), epoch(2, 4.0)])
    compare = f"/api/compare?run_id={run.id}&history=true"
    metrics = f"/api/runs/{run.id}/metrics?kind=epoch"
    for _ in range(2):
        assert client.get(metrics).json()["count"] == 2
        assert client.get(compare).json()["data"][0]["epochs_done"] == 2

    # Resubmitted, it prints a third epoch; the monitor reads it and is done with the run again.
    with (tmp_path / "r" / OUTPUT_FILE).open("a") as output:
        output.write(format_record(epoch(3, 4.2)) + "\n")
    stored = session.get(Run, run.id)
    assert stored is not None
    stored.attempt, stored.ingest_done = stored.attempt + 1, False
    ingest(session, stored)
    stored.ingest_done = True
    session.add(stored)
    session.commit()

    assert client.get(metrics).json()["count"] == 3
    answer = client.get(compare).json()
    assert answer["data"][0]["epochs_done"] == 3
    assert [point["epoch"] for point in answer["histories"][run.id]] == [1, 2, 3]


def test_a_kept_comparison_is_the_one_made_afresh(client, session, tmp_path):
    experiment = experiment_row(session)
    for gpus, seconds in [(1, 8.0), (2, 4.5), (4, 2.6)]:
        records: list[WorkerRecord] = [start(), *(epoch(n, seconds * (1.3 if n == 1 else 1.0)) for n in range(1, 5))]
        printed_run(session, experiment, tmp_path / str(gpus), records, gpus=gpus)
    path = f"/api/compare?experiment_id={experiment.id}&history=true"
    forget_everything_kept()
    fresh = client.get(path).content
    answer = client.get(path)
    kept = answer.content  # as the client decodes it: kept answers are sent gzipped once to clients that accept it
    assert kept == fresh
    assert len(kept) > 4096 and answer.headers["content-encoding"] == "gzip"
    ids = session.exec(select(Run.id)).all()
    assert ComparePublic.model_validate_json(kept).count == len(ids) == 3
    # And a live run among finished ones is read afresh each time.
    live = run_row(session, experiment, tmp_path / "live", state=RunState.running, position=9)
    assert [row["run_id"] for row in client.get(path).json()["data"]][-1] == live.id


def test_records_kept_are_the_models_answer(client, session, tmp_path):
    run = printed_run(session, experiment_row(session), tmp_path / "r", [start(), epoch(1, 5.0)])
    forget_everything_kept()
    for _ in range(2):
        answer = client.get(f"/api/runs/{run.id}/metrics").content
        assert answer == runs.metrics(session, run.id, None, 0, 10_000).model_dump_json().encode()
        assert MetricsPublic.model_validate_json(answer).count == 2


def test_a_runs_records_answer_as_each_stored_record_validated_by_its_model(client, session, tmp_path):
    """The records are read as their stored JSON and validated in one pass: the answer is the one each stored record
    validated by its model makes, a program's own figures kept, a non-finite one as null (SQLite keeps NaN; PostgreSQL's
    json type refuses it), a record printed again superseded; for every kind, page and history."""
    step = '[METRIC] {"v":1,"kind":"step","epoch":1,"step":9,"train_loss":%s}' % (
        "NaN" if session.get_bind().dialect.name == "sqlite" else "0.25"
    )
    lines = [format_record(start()), format_record(epoch(1, 5.0, my_figure=3)), step, format_record(epoch(1, 4.0))]
    (tmp_path / OUTPUT_FILE).write_text("".join(line + "\n" for line in lines))
    run = run_row(session, experiment_row(session), tmp_path)
    ingest(session, run)
    session.commit()
    stored = session.exec(select(Metric).where(Metric.run_id == run.id).order_by(col(Metric.offset))).all()
    assert [(m.kind, m.counts) for m in stored] == [("start", True), ("epoch", False), ("step", True), ("epoch", True)]
    asked: list[dict[str, str | int]] = [{}, {"kind": "epoch"}, {"skip": 1, "limit": 2}, {"history": "true"}]
    asked.append({"kind": "epoch", "history": 1})
    for params in asked:
        history = "history" in params
        chosen = [m for m in stored if (history or m.counts) and params.get("kind", m.kind) == m.kind]
        page = chosen[int(params.get("skip", 0)) :][: int(params.get("limit", 10_000))]
        records = [{**m.record, "superseded": not m.counts} if history else m.record for m in page]
        expected = MetricsPublic.model_validate({"data": records, "count": len(chosen)})
        assert client.get(f"/api/runs/{run.id}/metrics", params=params).content == as_json(expected), params


def test_listed_experiments_follow_their_sharing_and_their_runs_states(client, session, tmp_path):
    """An experiment's listing is kept under its id and sharing, its runs counted afresh: a change made elsewhere
    (SQL here, as another process's) to either is listed as soon as it is committed."""
    experiment = experiment_row(session)
    run = run_row(session, experiment, tmp_path, state=RunState.pending)
    for _ in range(2):  # made, then kept
        (listed,) = client.get("/api/experiments").json()["data"]
        assert (listed["sharing"], listed["states"], listed["run_count"]) == ("private", {"pending": 1}, 1)
    session.execute(text("UPDATE experiment SET sharing = 'everyone' WHERE id = :id"), {"id": experiment.id})
    session.execute(text("UPDATE run SET state = 'running' WHERE id = :id"), {"id": run.id})
    session.commit()
    (listed,) = client.get("/api/experiments").json()["data"]
    assert (listed["sharing"], listed["states"], listed["run_count"]) == ("everyone", {"running": 1}, 1)
    forget_everything_kept()
    assert client.get("/api/experiments").json()["data"] == [listed]


def test_a_memo_keeps_the_most_recently_used_within_its_bounds():
    memo: Memo[bytes] = Memo(2)
    for key in "abc":
        memo.put(key, key.encode())
    assert memo.peek("a") is None and len(memo) == 2
    assert memo.get("b", lambda: b"made") == b"b"
    memo.put("d", b"d")  # c, the least recently used, goes
    assert memo.peek("c") is None and memo.peek("b") == b"b"

    sized: Memo[bytes] = Memo(100, weigh=len, budget=10)
    sized.put("big", b"x" * 11)  # larger than the whole budget: not kept
    assert sized.peek("big") is None
    for key in "abc":
        sized.put(key, b"x" * 4)
    assert sized.peek("a") is None and sized.peek("c") == b"xxxx"
