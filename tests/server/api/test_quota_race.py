"""Quotas hold under concurrent submissions: the check and the insert of the runs are one step per user, on SQLite
and on PostgreSQL alike (this directory's tests run on both)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, col, func, select

from server.config import Settings
from server.models import Run
from server.services import users
from tests.conftest import bearer, local_client
from tests.factories import experiment_request
from tests.server.api.test_auth import TRUE

SUBMISSIONS = 20


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    # Jobs whose worker is `true`, and no monitor: every accepted run stays live, so it counts at once.
    quick = settings.model_copy(update={"worker_python": TRUE})
    with local_client(quick) as client:
        yield client


def one_run() -> dict[str, object]:
    return experiment_request(grid={"strategy": ["single"], "gpus": [1]})


def all_at_once(client: TestClient, headers: dict[str, str], count: int) -> Counter[int]:
    """`count` submissions of one run each, released together from as many threads; their status codes."""
    start = threading.Barrier(count)

    def submit(_index: int) -> int:
        start.wait(timeout=60)
        return client.post("/api/experiments", json=one_run(), headers=headers).status_code

    with ThreadPoolExecutor(max_workers=count) as pool:
        return Counter(pool.map(submit, range(count)))


def runs_of(client: TestClient, owner: str) -> int:
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        return session.exec(select(func.count()).where(col(Run.owner) == owner)).one()


@pytest.mark.parametrize(
    ("quota", "most"),
    [
        (users.Quotas(max_concurrent_runs=2, max_runs_per_day=6), 2),
        (users.Quotas(max_runs_per_day=3), 3),
    ],
    ids=["two-at-once", "three-a-day"],
)
def test_concurrent_submissions_never_exceed_a_quota(client, quota, most):
    with Session(client.app.state.engine) as session:
        alice = bearer(users.add_user(session, "alice", quotas=quota))
    statuses = all_at_once(client, alice, SUBMISSIONS)
    assert statuses == Counter({201: most, 429: SUBMISSIONS - most}), statuses
    assert runs_of(client, "alice") == most
