"""Who a token or session cookie stands for, kept a few seconds by each server process (server.services.signed_in):
what it saves (a sender seen a moment ago costs the database nothing), and what it must not cost (a change made
in this process counts at once, one made elsewhere within the TTL, and a session never outlives its end)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient
from sqlalchemy import event, update
from sqlmodel import Session, col

from server.config import Settings
from server.models import ApiToken, utcnow
from server.scheduler.local import LocalScheduler
from server.services import users
from tests.conftest import make_client
from tests.factories import experiment_request
from tests.server.api.test_auth import PASSWORD, TRUE, add, anonymous, database, sign_in


def client_with(settings: Settings, **changes: object) -> TestClient:
    """A server whose jobs' worker is `true`, with these settings changed."""
    changed = settings.model_copy(update={"worker_python": TRUE, **changes})
    return make_client(changed, LocalScheduler(changed.runs_dir / ".local-jobs"))


@contextmanager
def statements(client: TestClient) -> Iterator[list[str]]:
    """The SQL the client's server runs meanwhile."""
    engine = client.app.state.engine  # type: ignore[attr-defined]
    executed: list[str] = []

    def seen(conn: object, cursor: object, statement: str, *args: object) -> None:
        executed.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        yield executed
    finally:
        event.remove(engine, "before_cursor_execute", seen)


def test_a_sender_seen_a_moment_ago_costs_the_database_nothing(settings):
    for name, ttl_s, looked_up in (("alice", 5.0, False), ("bob", 0.0, True)):
        with client_with(settings, signed_in_ttl_s=ttl_s) as client:
            headers = add(client, name)
            assert client.get("/api/profiles", headers=headers).status_code == 200
            with statements(client) as executed:
                assert client.get("/api/profiles", headers=headers).status_code == 200
            assert bool(executed) is looked_up, executed


def test_a_change_made_by_this_process_counts_at_once(settings):
    with client_with(settings, signed_in_ttl_s=300) as client:
        alice, bob = add(client, "alice"), add(client, "bob")
        assert client.post("/api/experiments", json=experiment_request(), headers=bob).status_code == 201
        assert client.get("/api/experiments?owner=bob", headers=alice).json()["count"] == 0
        with database(client) as session:
            users.change_user(session, "alice", is_admin=True)
        assert client.get("/api/experiments?owner=bob", headers=alice).json()["count"] == 1
        with database(client) as session:
            users.revoke_user(session, "alice")
        assert client.get("/api/experiments", headers=alice).status_code == 401


def test_a_revocation_made_elsewhere_counts_within_the_ttl(settings):
    """No seconds assumed of the machine: the sender is kept from some moment after `before`, so until
    `before + ttl` its token must still be admitted, and no refusal may come before then."""
    ttl_s = 10.0
    with client_with(settings, signed_in_ttl_s=ttl_s) as client:
        alice = add(client, "alice")
        before = time.monotonic()
        assert client.get("/api/experiments", headers=alice).status_code == 200
        # As the admin command in another process revokes it: a row changed, nothing said to this process.
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            session.execute(update(ApiToken).where(col(ApiToken.user_name) == "alice").values(revoked_at=utcnow()))
            session.commit()
        status = client.get("/api/experiments", headers=alice).status_code
        if time.monotonic() - before < ttl_s:
            assert status == 200, "a sender kept within the TTL was looked up again"
        while client.get("/api/experiments", headers=alice).status_code == 200:
            assert time.monotonic() - before < ttl_s + 60, "the revoked token is still admitted"
            time.sleep(0.2)
        assert time.monotonic() - before >= ttl_s


def test_a_kept_session_ends_when_it_ends(settings):
    """The session lasts 10 s from its sign-in; the sender is kept far longer, and still refused once it ended."""
    lifetime_s = 10.0
    with client_with(settings, signed_in_ttl_s=300, session_hours=lifetime_s / 3600) as client:
        add(client, "alice", password=PASSWORD)
        before = time.time()
        browser = sign_in(client, name="alice", password=PASSWORD)
        signed_in_by = time.time()
        status = browser.get("/api/experiments").status_code
        if time.time() - before < lifetime_s:
            assert status == 200
        time.sleep(max(signed_in_by + lifetime_s - time.time(), 0) + 0.5)
        assert browser.get("/api/experiments").status_code == 401
        assert anonymous(client).get("/api/experiments").status_code == 401
