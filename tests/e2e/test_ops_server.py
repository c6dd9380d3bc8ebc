"""Operations on a real server process: JSON logs with request ids, and readiness that follows slurmctld."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import httpx
import pytest

from benches.server_process import running_server
from server.scheduler.slurm import SlurmScheduler
from tests.e2e.test_lifecycle import unreachable, wait_until


def test_json_logs_carry_the_request_id_and_the_access_fields(tmp_path):
    with running_server(tmp_path, "local", {"SCALELAB_LOG_FORMAT": "json"}) as url:
        response = httpx.get(f"{url}/api/runs/nope", headers={"X-Request-ID": "probe-42"}, timeout=10)
        assert (response.status_code, response.headers["X-Request-ID"]) == (404, "probe-42")
        made = httpx.get(f"{url}/healthz", timeout=10).headers["X-Request-ID"]

        def access_lines() -> list[dict]:
            lines = (tmp_path / "server.log").read_text().splitlines()
            entries = [json.loads(line) for line in lines]  # every line is one JSON object
            return [entry for entry in entries if entry["logger"] == "server.access"]

        entries = wait_until("both requests were logged", lambda: len(access_lines()) >= 3 and access_lines())
    by_id = {entry.get("request_id"): entry for entry in entries}
    probe = by_id["probe-42"]
    assert {key: probe[key] for key in ("level", "method", "path", "status")} == {
        "level": "info", "method": "GET", "path": "/api/runs/nope", "status": 404,
    }  # fmt: skip
    assert probe["duration_ms"] >= 0 and re.match(r"\d{4}-\d\d-\d\dT", probe["time"])
    assert by_id[made]["path"] == "/healthz"
    startup = [json.loads(line) for line in (tmp_path / "server.log").read_text().splitlines()]
    assert any(entry["logger"] == "uvicorn.error" and "Started server process" in entry["message"] for entry in startup)


def test_text_logs_stay_lines_for_people(tmp_path):
    with running_server(tmp_path, "local") as url:
        httpx.get(f"{url}/healthz", timeout=10)
        wait_until("the request was logged", lambda: "GET /healthz 200" in (tmp_path / "server.log").read_text())
    line = next(line for line in (tmp_path / "server.log").read_text().splitlines() if "GET /healthz" in line)
    assert re.match(r"\d{4}-\d\d-\d\d [\d:,]+ INFO server.access: GET /healthz 200 [\d.]+ ms$", line)


@pytest.mark.slurm
def test_slurm_answers_a_ping(slurm):
    SlurmScheduler().ping()


@pytest.mark.slurm
def test_readyz_follows_the_controller(slurm, tmp_path):
    """The server's own copy of slurm.conf is pointed at a port where no slurmctld listens, then back: the
    shared controller is never touched."""
    real = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    conf = tmp_path / "slurm.conf"
    conf.write_text(real.read_text())
    with running_server(tmp_path, "slurm", {"SLURM_CONF": str(conf)}) as url:
        assert httpx.get(f"{url}/readyz", timeout=30).status_code == 200
        unreachable(conf)
        response = httpx.get(f"{url}/readyz", timeout=30)
        assert response.status_code == 503, response.text
        body = response.json()
        assert body["status"] == "not ready"
        assert body["checks"][0] == {"name": "database", "ok": True, "detail": "answers"}
        scheduler = body["checks"][1]
        assert scheduler["ok"] is False
        assert re.fullmatch(r"slurm: scontrol ping: Slurmctld\(primary\) at \S+ is DOWN", scheduler["detail"])
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200  # alive all the same
        conf.write_text(real.read_text())
        assert httpx.get(f"{url}/readyz", timeout=30).json()["status"] == "ready"
