"""The database failing under the server: PostgreSQL restarted under load, a migration killed halfway."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import httpx
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import func, text
from sqlmodel import Session, SQLModel, select

from benches.postgres import postgres_database
from benches.server_process import REPO, running_server
from server.db import alembic_config, init_db, make_engine
from server.models import Experiment, Run
from tests.factories import experiment_request

POSTGRES_LOCAL = REPO / "scripts" / "postgres-local"

# A script that upgrades the database at argv[1] to the newest schema, and stops dead in the middle of migration 0009
# (its summary columns added, their values not yet filled in), after telling so in the file argv[2]: the test kills
# it there.
UPGRADE_AND_STOP_IN_0009 = """
import sys, time
from pathlib import Path
from sqlalchemy import event
from server.db import init_db, make_engine

engine = make_engine(sys.argv[1])

@event.listens_for(engine, "before_cursor_execute")
def stop_in_0009(conn, cursor, statement, parameters, context, executemany):
    if statement.lstrip().startswith("UPDATE runsummary"):
        Path(sys.argv[2]).write_text(statement)
        time.sleep(3600)

init_db(engine)
"""


def test_a_migration_killed_halfway_leaves_the_database_usable(tmp_path, database_url):
    """A server killed while it upgrades the schema: the next start finishes the upgrade, and the data stays."""
    engine = make_engine(database_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0008")
        connection.execute(
            text("INSERT INTO experiment (id, name, created_at, request) VALUES ('e1', 'kept', '2026-01-01', '{}')")
        )
    engine.dispose()

    reached = tmp_path / "reached-0009"
    upgrading = subprocess.Popen(
        [sys.executable, "-c", UPGRADE_AND_STOP_IN_0009, database_url, str(reached)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 120
        while not reached.exists():
            assert upgrading.poll() is None, "the upgrade ended before it reached migration 0009"
            assert time.monotonic() < deadline, "the upgrade did not reach migration 0009 in 120 s"
            time.sleep(0.1)
    finally:
        upgrading.send_signal(signal.SIGKILL)
        upgrading.wait()

    engine = make_engine(database_url)
    init_db(engine)  # as the server does when it starts again
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), SQLModel.metadata) == []
    with Session(engine) as session:
        assert session.exec(select(Experiment.name)).all() == ["kept"]
    engine.dispose()


# The restart test stops and starts a PostgreSQL server of its own, scripts/postgres-local's on another port and state
# directory: the suite's server stays up for the tests running beside it (pytest-xdist) and for anyone else using it.
OWN_POSTGRES = {"SCALELAB_POSTGRES_STATE_DIR": "/var/lib/scalelab-postgres-restarts", "SCALELAB_POSTGRES_PORT": "5434"}


def _postgres_local(*args: str) -> str:
    command = [str(POSTGRES_LOCAL), *args]
    env = {**os.environ, **OWN_POSTGRES}
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120, env=env).stdout.strip()


class Load:
    """Clients in threads, each submitting experiments or listing runs until stopped; every answer is counted."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.statuses: Counter[int] = Counter()
        self.created: list[str] = []
        self.unavailable: list[httpx.Response] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._submit) for _ in range(2)]
        self._threads += [threading.Thread(target=self._read) for _ in range(2)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _record(self, response: httpx.Response) -> None:
        with self._lock:
            self.statuses[response.status_code] += 1
            if response.status_code == 503:
                self.unavailable.append(response)
            elif response.status_code >= 300:
                self.failures.append(f"{response.request.method} {response.request.url}: {response.status_code}")

    def _submit(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self._stop.is_set():
                response = self._ask(client.post, "/api/experiments", json=experiment_request(name="under restart"))
                if response is not None and response.status_code == 201:
                    with self._lock:
                        self.created.append(response.json()["id"])

    def _read(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self._stop.is_set():
                self._ask(client.get, "/api/runs", params={"limit": 20})

    def _ask(self, method: Any, path: str, **options: Any) -> httpx.Response | None:
        """One request, counted; an answer cut short (the server failed after it began) is a failure too."""
        try:
            response: httpx.Response = method(path, **options)
            response.read()
        except httpx.HTTPError as exc:
            with self._lock:
                self.failures.append(f"{path}: {exc!r}")
            return None
        self._record(response)
        return response

    def count(self, status: int) -> int:
        with self._lock:
            return self.statuses[status]


def _wait_for(what: str, check, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.2)


def _restart_under(load: Load) -> None:
    _wait_for("the load was served", lambda: load.count(201) >= 2 and load.count(200) >= 2)
    try:
        _postgres_local("down")
        _wait_for("a request met the stopped database", lambda: load.count(503) >= 4)
    finally:
        _postgres_local("up")
    served = load.count(201), load.count(200)
    _wait_for("the server served again", lambda: load.count(201) > served[0] + 2 and load.count(200) > served[1])


def test_requests_get_503_while_postgresql_restarts_and_the_server_recovers_by_itself(tmp_path, database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("a restart of the database server: SQLite has none")
    if os.geteuid() != 0:
        pytest.skip("scripts/postgres-local runs and restarts a PostgreSQL server as root")
    try:
        with postgres_database(_postgres_local("up")) as own_url:
            _restart_under_the_server(tmp_path, own_url)
    finally:
        _postgres_local("down")


def _restart_under_the_server(tmp_path, database_url: str) -> None:
    # The workers do nothing (true exits 0): what is under test is the database, not the runs.
    env = {"SCALELAB_DATABASE_URL": database_url, "SCALELAB_WORKER_PYTHON": "/bin/true"}
    grid_runs = len(experiment_request()["grid"]["gpus"])
    with running_server(tmp_path, "local", env) as url, Load(url) as load:
        _restart_under(load)

    assert load.failures == [], load.failures
    answer = load.unavailable[0]
    assert answer.headers["Retry-After"] == "5"
    assert "the database cannot be reached just now" in answer.json()["detail"]

    # Nothing half-written: every experiment kept has all its runs, and every one acknowledged was kept.
    engine = make_engine(database_url)
    with Session(engine) as session:
        runs_of = dict(session.exec(select(Run.experiment_id, func.count()).group_by(Run.experiment_id)).all())
        experiments = session.exec(select(Experiment.id)).all()
    engine.dispose()
    assert set(load.created) <= set(experiments)
    assert all(runs_of.get(experiment_id) == grid_runs for experiment_id in experiments), runs_of
