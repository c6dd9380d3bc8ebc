"""Shared fixtures: settings on temporary paths, a database, the app under test, and a real server process."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session

from benches.server_process import running_server
from server.config import Settings
from server.db import init_db, make_engine
from server.main import create_app
from server.models import User
from server.scheduler import Job, Scheduler
from server.scheduler.local import LocalScheduler
from server.services import users
from tests import databases
from tests.unix_users import unix_people  # noqa: F401 (a fixture of the PAM and sharing tests)

REQUIRE_SLURM = os.environ.get("SCALELAB_REQUIRE_SLURM") == "1"
# The two-node cluster of `scripts/slurm-local up --nodes 2`; scripts/test exports where its slurm.conf is.
SLURM2_CONF = Path(os.environ.get("SCALELAB_SLURM2_CONF", "/etc/slurm-scalelab2/slurm.conf"))


def slurm_is_up(nodes: int = 1, env: dict[str, str] | None = None) -> bool:
    """At least `nodes` nodes of the cluster that `env` (default: ours) points at take jobs."""
    if not shutil.which("sinfo"):
        return False
    result = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, timeout=10, check=False, env=env
    )
    rows = [line.split() for line in result.stdout.splitlines()]
    # (sinfo -N lists a node once per partition; planned: held by the backfill scheduler for a waiting job.)
    taking = ("idle", "mix", "alloc", "plnd")
    ready = {row[0] for row in rows if len(row) == 2 and any(state in row[1] for state in taking)}
    return result.returncode == 0 and len(ready) >= nodes


def _up_or_skip(up: bool, message: str) -> None:
    """Skip where no Slurm runs, but fail where the suite was told it must (CI)."""
    if up:
        return
    if REQUIRE_SLURM:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def slurm() -> None:
    _up_or_skip(slurm_is_up(), "the local Slurm is not up: run scripts/slurm-local up")


@pytest.fixture(scope="session")
def slurm2_env() -> dict[str, str]:
    """The environment of a Slurm client of the two-node cluster (its SLURM_CONF)."""
    env = {**os.environ, "SLURM_CONF": str(SLURM2_CONF)}
    up = SLURM2_CONF.is_file() and slurm_is_up(nodes=2, env=env)
    _up_or_skip(up, f"the two-node Slurm ({SLURM2_CONF}) is not up: run scripts/slurm-local up --nodes 2")
    return env


# ---- Parallel runs: scripts/test runs the suite on several pytest-xdist workers (--dist loadgroup) ----
# Tests that share one of the machine's resources take turns: each resource's tests form one group, which one worker
# runs one test after another. Every other test runs on whichever worker is free.
# - The one-node Slurm cluster: its node is one, so a job beside another raises the other run's shared_node flag and
#   names it in its accounting; an exclusive job waits for the node to empty; the polling-cost test counts the
#   controller's RPCs; tests kill and restart slurmrestd, install the shared instance and its service account, and
#   build and run the worker image with Podman (the container tests run on this cluster too).
# - The two-node cluster (SCALELAB_SLURM2_CONF): its node-failure test stops a node's slurmd, its states tests fill
#   the nodes on purpose.
# - The Slurm 24.11 cluster in containers: one cluster, brought up once, with its own Podman containers.
# - The PAM and sharing tests' Unix users (tests/unix_users.py): made and changed (locked, expired, regrouped) by the
#   tests, with useradd and usermod, which cannot run twice at once on /etc/passwd.
ON_SLURM = ("slurm", "load", "container")
GROUPS = ("slurm-24.11", "slurm-two-nodes", "slurm-one-node", "unix-people")


def shared_resource(item: pytest.Item) -> str | None:
    """The group of the resource that `item` cannot share with a test running at the same time, if any."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if item.get_closest_marker("slurm2411"):
        return "slurm-24.11"
    if "slurm2_env" in fixtures:
        return "slurm-two-nodes"
    if any(item.get_closest_marker(mark) for mark in ON_SLURM):
        return "slurm-one-node"
    if "unix_people" in fixtures:
        return "unix-people"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A test that names its group itself keeps it.
    for item in items:
        group = shared_resource(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session: pytest.Session) -> None:
    # pytest-xdist passes a test's group to its scheduler as a suffix of the node id (@group). Where it cannot (a
    # pytest it does not know), every test would run anywhere, at once with those sharing its resource: stop instead.
    if not getattr(session.config.option, "loadgroup", False):  # set on xdist's workers only
        return
    lost = [item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(f"pytest-xdist could not group {len(lost)} tests by resource (first: {lost[0]})")


# Where a run's time goes, by group: the one-node Slurm group runs its tests one after another, so its sum is the
# least the whole run can take, and CI has a budget of 40 minutes. Summed from every report (setup, call, teardown).
# By module too, the costliest first: what a cut would save.
_GROUP_SECONDS: dict[str, float] = {}
_MODULE_SECONDS: dict[str, float] = {}
MODULES_SHOWN = 25


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # xdist's suffix, where it grouped the test (a parameter may hold an @ too: an image's name@digest).
    suffix = report.nodeid.rpartition("@")[2]
    group = suffix if suffix in GROUPS else "ungrouped"
    _GROUP_SECONDS[group] = _GROUP_SECONDS.get(group, 0.0) + report.duration
    module = report.nodeid.partition("::")[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration


def _largest(seconds: dict[str, float], shown: int | None = None) -> list[tuple[str, float]]:
    return sorted(seconds.items(), key=lambda item: -item[1])[:shown]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _GROUP_SECONDS:
        terminalreporter.section("time by group (tests of one group run one after another)")
        for group, seconds in _largest(_GROUP_SECONDS):
            terminalreporter.write_line(f"{seconds:8.0f} s  {group}")
        terminalreporter.section(f"time by module (the {MODULES_SHOWN} costliest)")
        for module, seconds in _largest(_MODULE_SECONDS, MODULES_SHOWN):
            terminalreporter.write_line(f"{seconds:8.0f} s  {module}")


TESTS = Path(__file__).resolve().parent
# The database-facing suites: each of their tests that uses a database runs once on SQLite and once on PostgreSQL.
# Elsewhere SQLite alone serves, as what those tests check does not depend on the database.
ON_BOTH_DATABASES = (
    "server/api/",
    "server/test_db.py",
    "server/test_database_faults.py",
    "server/test_lease.py",
    "server/test_hangs.py",
    "server/test_reconcile.py",
    "server/services/ingestion/",
    "server/services/test_dependents.py",
    "e2e/test_faults.py",
    "load/",
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "database_url" not in metafunc.fixturenames:
        return
    where = metafunc.definition.path.relative_to(TESTS).as_posix()
    if where.startswith(ON_BOTH_DATABASES):
        metafunc.parametrize("database_url", databases.KINDS, indirect=True)


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a new, empty database: SQLite, or PostgreSQL where the suite runs on both (see above)."""
    with databases.database(getattr(request, "param", "sqlite"), tmp_path) as url:
        yield url


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        runs_dir=tmp_path / "runs",
        scheduler="local",
        worker_python=Path(sys.executable),
        poll_interval_s=0.2,
    )


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    engine = make_engine(settings.database_url)
    init_db(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    with Session(engine) as session:
        yield session


@pytest.fixture
def local_scheduler(settings: Settings) -> LocalScheduler:
    return LocalScheduler(settings.runs_dir / ".local-jobs")  # its jobs end with the test (local_jobs_end_with_it)


@pytest.fixture(autouse=True)
def local_jobs_end_with_it(request: pytest.FixtureRequest) -> Iterator[None]:
    """Cancel, when a test ends, the local scheduler's jobs it left running anywhere in its tmp_path: those of the
    `settings` fixture's runs directory and of servers it ran there (running_server(tmp_path, "local")), which
    cannot cancel their jobs themselves at exit, since a server started again in the same place follows them."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp_path: Path = request.getfixturevalue("tmp_path")  # now: at teardown it may be gone
    yield
    # os.walk, not Path.glob("**"), which follows links to directories: hostile-output tests leave links to "/".
    for folder, subfolders, _ in os.walk(tmp_path):
        if ".local-jobs" in subfolders:
            cancel_left_running(LocalScheduler(Path(folder) / ".local-jobs"))


def cancel_left_running(scheduler: LocalScheduler) -> None:
    """Cancel the jobs a test's local scheduler started that have not ended. Most API tests submit a valid
    experiment to see what the API answers and never wait for its training: unstopped, those jobs (torchrun with up
    to 4 processes each) trained on for a minute or more after their test, on the CPU the next tests need."""
    started = [Job(pid_file.stem) for pid_file in scheduler.state_dir.glob("*.pid")]
    for job, status in scheduler.poll(started).items():
        if not status.state.is_final:
            scheduler.cancel(job.job_id)


ADMIN = "tester"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def admin_headers(app: FastAPI) -> dict[str, str]:
    """A new API token of the admin `tester` of the app's database (made on first use)."""
    with Session(app.state.engine) as session:
        if session.get(User, ADMIN) is None:
            return bearer(users.add_user(session, ADMIN, is_admin=True))
        return bearer(users.issue_token(session, ADMIN))


def make_client(settings: Settings, scheduler: Scheduler, **options: Any) -> TestClient:
    """The app with authentication on, as deployed; the client signs its requests as an admin."""
    # No background monitor: tests drive its cycles themselves, so nothing races them.
    app = create_app(settings, scheduler, start_monitor=False)
    return TestClient(app, headers=admin_headers(app), **options)


@contextlib.contextmanager
def local_client(settings: Settings, **options: Any) -> Iterator[TestClient]:
    """make_client on a local scheduler of its own, whose jobs left running are cancelled at the end."""
    scheduler = LocalScheduler(settings.runs_dir / ".local-jobs")
    try:
        with make_client(settings, scheduler, **options) as client:
            yield client
    finally:
        cancel_left_running(scheduler)


@pytest.fixture
def client(settings: Settings, local_scheduler: LocalScheduler) -> Iterator[TestClient]:
    with make_client(settings, local_scheduler) as client:
        yield client


@contextlib.contextmanager
def serving(directory: Path, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """A server on the real Slurm; whatever its tests left running there is cancelled at the end, so that it takes
    no slot and no CPU from the tests after them."""
    with running_server(directory, "slurm", env) as url:
        try:
            yield url
        finally:
            cancel_experiments(url)


def cancel_experiments(url: str) -> None:
    """Cancel every experiment of the server at `url` (those that have ended answer 409, and stay as they are)."""
    try:
        listed = httpx.get(f"{url}/api/experiments", params={"limit": 1000}, timeout=30)
        for experiment in listed.json()["data"] if listed.status_code == 200 else []:
            httpx.post(f"{url}/api/experiments/{experiment['id']}/cancel", timeout=30)
    except httpx.HTTPError:
        pass  # a server the test stopped: nothing to ask


@pytest.fixture
def slurm_server(slurm: None, tmp_path: Path) -> Iterator[str]:
    """A real server on the real local Slurm."""
    # A short poll interval, so that tests waiting on the monitor do not wait long.
    with serving(tmp_path, {"SCALELAB_POLL_INTERVAL_S": "1"}) as url:
        yield url


WORKER_IMAGE = "localhost/scalelab-worker:latest"


@pytest.fixture(scope="session")
def worker_image() -> str:
    """The worker image's digest, the image built by containers/build (seconds when base, wheels and layers are
    cached). containers/build installs Podman and builds as root: elsewhere the container tests skip."""
    if os.geteuid() != 0:
        pytest.skip("containers/build installs Podman and builds as root")
    repo = Path(__file__).resolve().parent.parent
    built = subprocess.run(
        [str(repo / "containers" / "build"), "tools", "base", "wheels", "worker"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    inspect = ["podman", "image", "inspect", "--format", "{{.Digest}}", WORKER_IMAGE]
    digest = subprocess.run(inspect, capture_output=True, text=True, check=True).stdout.strip()
    assert digest.startswith("sha256:")
    return digest
