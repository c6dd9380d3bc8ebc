"""The probes, the Prometheus metrics and the request ids, on the app with authentication on."""

from __future__ import annotations

import math
import re
import subprocess
import threading
import time

from fastapi.testclient import TestClient
from sqlmodel import Session

from contract.rundir import OUTPUT_FILE
from contract.states import RunState
from server.api import ops
from server.db import make_engine
from server.scheduler.slurm import SlurmScheduler
from server.services import users
from tests.conftest import make_client
from tests.factories import experiment_row, run_row


def samples(text: str) -> dict[str, float]:
    """Each sample line of a Prometheus text exposition, by its name and labels."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def test_healthz_and_readyz_need_no_sign_in(client):
    anonymous = TestClient(client.app)
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    ready = anonymous.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {
        "status": "ready",
        "checks": [
            {"name": "database", "ok": True, "detail": "answers"},
            {"name": "scheduler", "ok": True, "detail": "local answers"},
        ],
    }


def test_readyz_is_a_503_naming_the_database_when_it_cannot_be_opened(client, tmp_path):
    # A real SQLite error: where the database file should be there is a directory.
    (tmp_path / "gone.db").mkdir()
    client.app.state.engine = make_engine(f"sqlite:///{tmp_path / 'gone.db'}")
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not ready"
    database, scheduler = body["checks"]
    assert (database["name"], database["ok"], scheduler["ok"]) == ("database", False, True)
    assert "unable to open database file" in database["detail"]


def test_readyz_is_a_503_with_what_slurm_said_when_the_controller_is_down(settings):
    def controller_down(argv):
        # What `scontrol ping` prints and exits with when slurmctld does not answer (Slurm 22.05).
        assert list(argv) == ["scontrol", "ping"]
        banner = "*" * 41
        out = f"Slurmctld(primary) at vm is DOWN\n{banner}\n** RESTORE SLURMCTLD DAEMON TO SERVICE **\n{banner}\n"
        return subprocess.CompletedProcess(argv, 1, out, "")

    with make_client(settings, SlurmScheduler(run=controller_down)) as client:
        response = TestClient(client.app).get("/readyz")
    assert response.status_code == 503
    scheduler = response.json()["checks"][1]
    assert scheduler == {
        "name": "scheduler",
        "ok": False,
        "detail": "slurm: scontrol ping: Slurmctld(primary) at vm is DOWN",
    }


def test_metrics_need_sign_in_when_authentication_is_on(client):
    response = TestClient(client.app).get("/metrics")
    assert response.status_code == 401


def test_metrics_are_for_admins_only(client):
    with Session(client.app.state.engine) as session:
        alice = users.add_user(session, "alice")
    response = client.get("/metrics", headers={"Authorization": f"Bearer {alice}"})
    assert response.status_code == 403
    assert "for admins" in response.json()["detail"]
    assert client.get("/metrics").status_code == 200  # the client signs in as an admin


def http_series(client: TestClient) -> set[str]:
    return {name for name in samples(client.get("/metrics").text) if name.startswith("scalelab_http_requests_total")}


def test_requests_to_ever_new_paths_add_no_series(client):
    anonymous = TestClient(client.app, follow_redirects=False)

    def stray(number: int) -> None:
        # A path of the static files' mount; one redirected to the path without its last slash; one matching
        # nothing; and a method no route knows.
        assert anonymous.post(f"/static/stray-{number}.js").status_code == 405
        assert anonymous.get(f"/static/stray-{number}.js").status_code == 404
        assert anonymous.get(f"/api/runs/stray{number}/").status_code == 307
        assert anonymous.get(f"/stray/{number}").status_code == 404
        assert anonymous.request(f"STRAY{number}", "/healthz").status_code == 405

    stray(0)
    http_series(client)  # /metrics's own
    first = http_series(client)
    for number in range(1, 30):
        stray(number)
    assert http_series(client) == first
    found = samples(client.get("/metrics").text)
    assert found['scalelab_http_requests_total{method="POST",route="/static/{path}",status="405"}'] == 30
    assert found['scalelab_http_requests_total{method="GET",route="/static/{path}",status="404"}'] == 30
    assert found['scalelab_http_requests_total{method="GET",route="unmatched",status="307"}'] == 30
    assert found['scalelab_http_requests_total{method="GET",route="unmatched",status="404"}'] == 30
    assert found['scalelab_http_requests_total{method="other",route="/healthz",status="405"}'] == 30


def test_metrics_count_runs_requests_cycles_lag_and_parse_errors(client, settings):
    app = client.app
    with Session(app.state.engine) as session:
        experiment = experiment_row(session)
        for position, state in enumerate([RunState.running, RunState.running, RunState.completed]):
            run_dir = settings.runs_dir / str(position)
            run_dir.mkdir(parents=True)
            run_row(session, experiment, run_dir, state=state, position=position, parse_errors=position)
        # The first running run has 1234 bytes its metrics do not hold yet; the monitor has not read them.
        (settings.runs_dir / "0" / OUTPUT_FILE).write_bytes(b"x" * 1233 + b"\n")
    assert client.get("/api/runs/nope").status_code == 404
    assert client.get("/api/runs/nope").status_code == 404

    before = samples(client.get("/metrics").text)
    assert math.isnan(before["scalelab_monitor_last_cycle_seconds"])
    assert before["scalelab_monitor_cycle_seconds_count"] == 0
    assert before["scalelab_ingest_lag_bytes"] == 1234
    assert before["scalelab_ingest_lag_seconds"] > 0
    assert before["scalelab_ingest_runs_behind"] == 1

    app.state.monitor.cycle()
    response = client.get("/metrics")
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    found = samples(response.text)
    assert found['scalelab_runs{state="running"}'] == 2
    assert found['scalelab_runs{state="completed"}'] == 1
    assert found['scalelab_runs{state="out_of_memory"}'] == 0
    assert found["scalelab_metric_parse_errors"] == 0 + 1 + 2  # the x's are no metric line: not an error
    assert found["scalelab_monitor_cycle_seconds_count"] == 1
    assert found['scalelab_monitor_cycle_seconds_bucket{le="+Inf"}'] == 1
    assert found["scalelab_monitor_last_cycle_seconds"] >= 0
    assert (found["scalelab_ingest_lag_bytes"], found["scalelab_ingest_runs_behind"]) == (0, 0)
    assert found["scalelab_scheduler_failures"] == 0
    # Counted by the route's template, whatever id was asked for.
    assert found['scalelab_http_requests_total{method="GET",route="/api/runs/{run_id}",status="404"}'] == 2
    assert found['scalelab_http_requests_total{method="GET",route="/metrics",status="200"}'] == 1
    client.get("/openapi.json")
    client.get("/no/such/page/1")
    client.get("/no/such/page/2")
    found = samples(client.get("/metrics").text)
    assert found['scalelab_http_requests_total{method="GET",route="/openapi.json",status="200"}'] == 1
    assert found['scalelab_http_requests_total{method="GET",route="unmatched",status="404"}'] == 2
    for line in response.text.splitlines():
        assert re.fullmatch(r'# (HELP|TYPE) \w+ .+|\w+(\{(\w+="([^"\\]|\\.)*",?)*\})? \S+', line), line


def test_request_ids_are_echoed_or_made(client):
    assert client.get("/healthz", headers={"X-Request-ID": "abc-123"}).headers["X-Request-ID"] == "abc-123"
    made = client.get("/healthz").headers["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", made)
    assert client.get("/healthz").headers["X-Request-ID"] != made
    # One that could forge log lines or bloat them is replaced.
    hostile = client.get("/healthz", headers={"X-Request-ID": "a b\tc" + "x" * 200}).headers["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", hostile)


def test_a_hung_scheduler_check_holds_one_thread_however_many_probes_come(settings, monkeypatch):
    # `scontrol ping` that hangs (as when slurmctld accepts the connection and never answers) until released.
    released = threading.Event()
    calls: list[str] = []

    def hung_ping(argv):
        calls.append(" ".join(argv))
        released.wait(timeout=30)
        return subprocess.CompletedProcess(argv, 0, "Slurmctld(primary) at vm is UP\n", "")

    monkeypatch.setattr(ops, "CHECK_TIMEOUT_S", 0.2)
    with make_client(settings, SlurmScheduler(run=hung_ping)) as client:
        anonymous = TestClient(client.app)
        answers = [anonymous.get("/readyz") for _ in range(8)]
        assert [answer.status_code for answer in answers] == [503] * 8
        first, later = answers[0].json()["checks"][1], answers[-1].json()["checks"][1]
        assert first["detail"] == "no answer within 0.2 s"
        assert later["detail"] == "no answer within 0.2 s (an earlier probe's check still waits for its answer)"
        assert calls == ["scontrol ping"], "each probe started a check of its own while the first still hung"
        released.set()
        deadline = time.monotonic() + 5
        while (answer := anonymous.get("/readyz")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert answer.status_code == 200, answer.text
