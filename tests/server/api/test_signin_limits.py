"""Password sign-ins throttled and bounded (server.services.signin_throttle), and credentials that end: a password
change or a revocation ends a user's tokens and sessions, tokens expire, and a token made with a token never
outlives it (issue 30, findings 13 and 17). On both databases."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlmodel import col

from server.config import Settings
from server.models import ApiToken, utcnow
from server.scheduler.local import LocalScheduler
from server.services import users
from tests.conftest import bearer, make_client
from tests.server.api.test_auth import PASSWORD, TRUE, add, anonymous, database, sign_in
from tests.server.api.test_auth import basic as basic_credentials

# Generous: a check held back by a test must never be refused for waiting on a loaded machine.
LONG_WAIT_S = 120.0


@pytest.fixture
def make(settings: Settings) -> Iterator[Callable[..., TestClient]]:
    """A server whose jobs' worker is `true`, with settings changed; closed after the test."""
    made: list[TestClient] = []

    def client_with(**changes: object) -> TestClient:
        changed = settings.model_copy(update={"worker_python": TRUE, **changes})
        client = make_client(changed, LocalScheduler(changed.runs_dir / ".local-jobs"))
        made.append(client.__enter__())
        return client

    yield client_with
    for client in made:
        client.__exit__(None, None, None)


def new_token(client: TestClient, headers: dict[str, str], **body: object) -> dict:
    response = client.post("/api/tokens", headers=headers, json=body or None)
    assert response.status_code == 201, response.text
    made: dict = response.json()
    return made


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every password scalelab's own accounts had checked (scrypt), in order: throttled attempts check none."""
    checked: list[str] = []
    real = users.password_matches

    def counted(password: str, stored: str | None) -> bool:
        checked.append(password)
        return real(password, stored)

    monkeypatch.setattr(users, "password_matches", counted)
    return checked


# ---- finding 13: throttling ----


def test_guesses_beyond_a_names_budget_get_429_without_being_checked(make, checks):
    client = make(signin_failures_per_name=3, signin_failures_per_address=1000)
    add(client, "alice", password=PASSWORD)
    bare = anonymous(client)
    for guess in range(3):
        assert bare.post("/api/tokens", headers=basic_credentials("alice", f"guess number {guess}")).status_code == 401
    assert len(checks) == 3
    # The budget is spent: the next attempts, the right password too, are refused unchecked, saying when to return.
    for password in ("guess number 4", PASSWORD):
        response = bare.post("/api/tokens", headers=basic_credentials("alice", password))
        assert response.status_code == 429, response.text
        assert 1 <= int(response.headers["Retry-After"]) <= 900
        assert "Too many failed sign-ins" in response.json()["detail"]
    assert len(checks) == 3
    # The sign-in form counts the same failures, and says so on the form.
    page = bare.post("/login", data={"name": "alice", "password": PASSWORD})
    assert page.status_code == 429 and "Retry-After" in page.headers
    assert "Too many failed sign-ins" in page.text and 'name="password"' in page.text
    # Another name from the same address is not locked; an admin ends alice's window at once.
    add(client, "bob", password=PASSWORD)
    assert bare.post("/api/tokens", headers=basic_credentials("bob", PASSWORD)).status_code == 201
    from server.services import signin_throttle  # (here: what runs this file against code without it fails later)

    with database(client) as session:
        assert signin_throttle.unlock(session, "alice")
    assert bare.post("/api/tokens", headers=basic_credentials("alice", PASSWORD)).status_code == 201


def test_guesses_beyond_an_addresss_budget_get_429_whatever_the_name(make, checks):
    client = make(signin_failures_per_name=100, signin_failures_per_address=4)
    add(client, "carol", password=PASSWORD)
    bare = anonymous(client)
    for name in ("ann", "ben", "cid", "dee"):  # names no one has count as well: names cannot be probed
        assert bare.post("/login", data={"name": name, "password": "a guess at it"}).status_code == 401
    response = bare.post("/api/tokens", headers=basic_credentials("carol", PASSWORD))
    assert response.status_code == 429 and int(response.headers["Retry-After"]) >= 1
    assert len(checks) == 4


def test_a_success_clears_its_names_failures(make):
    client = make(signin_failures_per_name=3, signin_failures_per_address=1000)
    add(client, "alice", password=PASSWORD)
    bare = anonymous(client)
    for _ in range(5):  # two failures, then the right one: never three failures in a row
        for guess in range(2):
            assert bare.post("/api/tokens", headers=basic_credentials("alice", f"wrong {guess}")).status_code == 401
        assert bare.post("/api/tokens", headers=basic_credentials("alice", PASSWORD)).status_code == 201


class Gate:
    """A password check held at its start: counts the checks inside at once, and lets them go when told."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inside = 0
        self.most = 0
        self.entered = threading.Event()
        self.open = threading.Event()
        self._lock = threading.Lock()
        real = users.password_matches

        def held(password: str, stored: str | None) -> bool:
            with self._lock:
                self.inside += 1
                self.most = max(self.most, self.inside)
            self.entered.set()
            try:
                self.open.wait(timeout=LONG_WAIT_S)
                return real(password, stored)
            finally:
                with self._lock:
                    self.inside -= 1

        monkeypatch.setattr(users, "password_matches", held)


def test_concurrent_password_checks_never_exceed_the_bound(make, monkeypatch):
    client = make(password_checks=2, password_check_wait_s=LONG_WAIT_S)
    add(client, "alice", password=PASSWORD)
    gate = Gate(monkeypatch)
    bare = anonymous(client)

    def attempt(index: int) -> int:
        return bare.post("/api/tokens", headers=basic_credentials("alice", f"guess {index}")).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = [pool.submit(attempt, index) for index in range(8)]
        assert gate.entered.wait(timeout=LONG_WAIT_S)
        # Give the other six every chance to get in (an unbounded server lets them), then let everyone go.
        for _ in range(200):
            if gate.most > 2:
                break
            threading.Event().wait(0.01)
        gate.open.set()
        statuses = [answer.result(timeout=LONG_WAIT_S) for answer in answers]
    assert gate.most <= 2
    assert statuses == [401] * 8  # each checked in turn, none refused for waiting


def test_a_sign_in_that_finds_every_check_busy_waits_then_gets_503(make, monkeypatch):
    client = make(password_checks=1, password_check_wait_s=0.05)
    add(client, "alice", password=PASSWORD)
    gate = Gate(monkeypatch)
    bare = anonymous(client)
    with ThreadPoolExecutor(max_workers=1) as pool:
        held = pool.submit(lambda: bare.post("/api/tokens", headers=basic_credentials("alice", PASSWORD)).status_code)
        assert gate.entered.wait(timeout=LONG_WAIT_S)
        response = bare.post("/api/tokens", headers=basic_credentials("alice", PASSWORD))
        page = bare.post("/login", data={"name": "alice", "password": PASSWORD})
        gate.open.set()
        assert held.result(timeout=LONG_WAIT_S) == 201
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    assert "Too many sign-ins at once" in response.json()["detail"]
    assert page.status_code == 503 and "Too many sign-ins at once" in page.text
    assert gate.most == 1


def test_failures_are_logged_with_name_and_address_never_the_password(make, caplog):
    client = make()
    add(client, "alice", password=PASSWORD)
    with caplog.at_level("WARNING", logger="server.services.signin_throttle"):
        assert (
            anonymous(client).post("/api/tokens", headers=basic_credentials("alice", "hunter2 guess")).status_code
            == 401
        )
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "'alice'" in logged and "testclient" in logged and "hunter2" not in logged


# ---- finding 17: credentials that end ----


def server_command(database_url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SCALELAB_DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "server", *args], input=stdin, capture_output=True, text=True, env=env, timeout=120
    )


def test_a_password_change_ends_the_users_sessions_and_tokens(make, settings):
    # Each process looks every sender up: the admin command is another process, as in production after the TTL.
    client = make(signed_in_ttl_s=0)
    alice = add(client, "alice", password=PASSWORD)
    made = new_token(client, basic_credentials("alice", PASSWORD))
    browser = sign_in(client, name="alice", password=PASSWORD)
    bob = add(client, "bob", password=PASSWORD)
    for headers in (alice, bearer(made["token"])):
        assert client.get("/api/runs", headers=headers).status_code == 200
    assert browser.get("/api/runs").status_code == 200
    changed = server_command(settings.database_url, "users", "set", "alice", "--password", stdin="a new passphrase\n")
    assert changed.returncode == 0, changed.stderr
    for headers in (alice, bearer(made["token"])):
        assert client.get("/api/runs", headers=headers).status_code == 401
    assert browser.get("/api/runs").status_code == 401
    assert "every token and session of theirs ended" in changed.stdout
    assert client.get("/api/runs", headers=bob).status_code == 200  # no one else's
    # The new password signs in; the old one no longer does.
    assert anonymous(client).post("/api/tokens", headers=basic_credentials("alice", PASSWORD)).status_code == 401
    assert new_token(anonymous(client), basic_credentials("alice", "a new passphrase"))["token"]
    # In this process, at once, however long the memo keeps senders.
    kept = make(signed_in_ttl_s=300)
    carol = add(kept, "carol", password=PASSWORD)
    assert kept.get("/api/runs", headers=carol).status_code == 200
    with database(kept) as session:
        users.change_user(session, "carol", password="yet another passphrase")  # noqa: S106 (a test user's)
    assert kept.get("/api/runs", headers=carol).status_code == 401


def test_a_token_made_with_a_token_ends_with_it_and_never_outlives_it(make):
    client = make()
    add(client, "alice", password=PASSWORD)
    maker = new_token(client, basic_credentials("alice", PASSWORD), lifetime_days=1)
    assert maker["parent_id"] is None
    child = new_token(client, bearer(maker["token"]), lifetime_days=30)
    grandchild = new_token(client, bearer(child["token"]))  # asks for no expiry: gets its maker's
    assert child["parent_id"] == maker["id"] and grandchild["parent_id"] == child["id"]
    assert child["expires_at"] == maker["expires_at"] == grandchild["expires_at"]
    shorter = new_token(client, bearer(maker["token"]), lifetime_days=0.5)
    assert shorter["expires_at"] < maker["expires_at"]
    for made in (child, grandchild):
        assert client.get("/api/runs", headers=bearer(made["token"])).status_code == 200
    revoked = client.delete(f"/api/tokens/{maker['id']}", headers=bearer(maker["token"]))
    assert revoked.status_code == 200
    for made in (maker, child, grandchild, shorter):
        assert client.get("/api/runs", headers=bearer(made["token"])).status_code == 401, made
    with database(client) as session:
        rows = {token.id: token for token in users.tokens_of(session, "alice")}
    assert all(rows[made["id"]].revoked_at is not None for made in (child, grandchild, shorter))


def test_a_token_whose_maker_was_revoked_meanwhile_is_refused(make):
    """A maker revoked while it was making a token (the cascade saw no child yet): the child is refused anyway."""
    client = make(signed_in_ttl_s=0)
    add(client, "alice", password=PASSWORD)
    maker = new_token(client, basic_credentials("alice", PASSWORD))
    child = new_token(client, bearer(maker["token"]))
    with database(client) as session:
        session.execute(update(ApiToken).where(col(ApiToken.id) == maker["id"]).values(revoked_at=utcnow()))
        session.commit()
    response = client.get("/api/runs", headers=bearer(child["token"]))
    assert response.status_code == 401 and "unknown or revoked" in response.json()["detail"]


def test_an_expired_token_is_refused_saying_so(make):
    client = make(signed_in_ttl_s=0)
    add(client, "alice", password=PASSWORD)
    made = new_token(client, basic_credentials("alice", PASSWORD), lifetime_days=1)
    assert client.get("/api/runs", headers=bearer(made["token"])).status_code == 200
    with database(client) as session:
        ended = utcnow() - timedelta(minutes=1)
        session.execute(update(ApiToken).where(col(ApiToken.id) == made["id"]).values(expires_at=ended))
        session.commit()
    response = client.get("/api/runs", headers=bearer(made["token"]))
    assert response.status_code == 401
    assert "expired" in response.json()["detail"] and "scalelab login" in response.json()["detail"]
    page = anonymous(client).post("/login", data={"token": made["token"]})
    assert page.status_code == 401 and "This API token expired at" in page.text


def test_a_lifetime_is_checked(make):
    client = make()
    add(client, "alice", password=PASSWORD)
    for days in (0, -1, 10_000, "soon"):
        response = client.post(
            "/api/tokens", headers=basic_credentials("alice", PASSWORD), json={"lifetime_days": days}
        )
        assert response.status_code == 422, (days, response.text)
        assert "lifetime_days" in response.text


def test_the_memo_never_keeps_a_token_past_its_expiry(make):
    client = make(signed_in_ttl_s=300)
    add(client, "alice", password=PASSWORD)
    made = new_token(client, basic_credentials("alice", PASSWORD), lifetime_days=1)
    assert client.get("/api/runs", headers=bearer(made["token"])).status_code == 200
    memo = client.app.state.signed_in
    sender = memo.recall(("token", users.digest(made["token"])))
    assert sender is not None and sender.session_ends is not None
    assert sender.session_ends.isoformat().startswith(made["expires_at"][:16])
