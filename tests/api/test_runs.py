"""Listing runs: filters and pagination over rows made directly in the database."""

from __future__ import annotations

from server.models import RunState
from tests.factories import experiment_row, run_row


def seed(session, tmp_path):
    first, second = experiment_row(session, "first"), experiment_row(session, "second")
    for position, state in enumerate([RunState.pending, RunState.running, RunState.completed]):
        run_row(session, first, tmp_path / f"a{position}", state=state, position=position)
    for position in range(2):
        run_row(session, second, tmp_path / f"b{position}", state=RunState.failed, position=position)
    return first, second


def test_filter_by_experiment_and_state(client, session, tmp_path):
    first, _second = seed(session, tmp_path)
    assert client.get("/api/runs").json()["count"] == 5
    assert client.get(f"/api/runs?experiment_id={first.id}").json()["count"] == 3
    body = client.get(f"/api/runs?experiment_id={first.id}&state=running&state=completed").json()
    assert sorted(run["state"] for run in body["data"]) == ["completed", "running"]
    assert client.get("/api/runs?state=failed").json()["count"] == 2


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
