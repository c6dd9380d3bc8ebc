"""Accounts: who may do what, tokens and sessions, CSRF, quotas, and the owner's Slurm account."""

from __future__ import annotations

import base64
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from benches.server_process import running_server
from contract.states import RunState
from server.api.deps import CSRF_HEADER, SESSION_COOKIE
from server.config import Settings
from server.main import create_app
from server.models import Run, User, WebSession, utcnow
from server.services import users
from tests.conftest import bearer, local_client
from tests.factories import experiment_request
from tests.server.api.test_experiments import counts

TRUE = Path(shutil.which("true") or "/bin/true")
PASSWORD = "correct horse battery"  # noqa: S105 (a test user's)


@pytest.fixture
def quick_settings(settings: Settings) -> Settings:
    """Jobs whose worker is `true`: submissions succeed at once, and nothing trains."""
    return settings.model_copy(update={"worker_python": TRUE})


@pytest.fixture
def client(quick_settings: Settings) -> Iterator[TestClient]:
    with local_client(quick_settings) as client:
        yield client


def database(client: TestClient) -> Session:
    """A session on the client's server's database."""
    return Session(client.app.state.engine)  # type: ignore[attr-defined]


def add(client: TestClient, name: str, **options) -> dict[str, str]:
    """A user of the client's server; the headers that sign a request as them."""
    with database(client) as session:
        return bearer(users.add_user(session, name, **options))


def submit(client: TestClient, headers: dict[str, str] | None = None, **overrides) -> dict:
    response = client.post("/api/experiments", json=experiment_request(**overrides), headers=headers)
    assert response.status_code == 201, response.text
    created: dict = response.json()
    return created


def anonymous(client: TestClient) -> TestClient:
    """The same server, with no credentials."""
    return TestClient(client.app)


def test_everything_but_the_docs_needs_a_signed_in_user(client):
    bare = anonymous(client)
    response = bare.get("/api/experiments")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "sign in first" in response.json()["detail"]
    assert bare.post("/api/experiments", json=experiment_request()).status_code == 401
    assert bare.get("/api/runs", headers=bearer("sl_not-a-token")).status_code == 401
    # A page sends the browser to sign in, and back afterwards.
    response = bare.get("/runs?state=failed", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=%2Fruns%3Fstate%3Dfailed"
    assert bare.get("/docs").status_code == 200 and bare.get("/openapi.json").status_code == 200
    assert counts(client) == (0, 0)


def test_revoking_ends_tokens_and_sessions_and_keeps_the_runs(client):
    alice = add(client, "alice", password=PASSWORD)
    created = submit(client, alice)
    bare = anonymous(client)
    bare.post("/login", data={"name": "alice", "password": PASSWORD})
    assert bare.get("/api/runs").status_code == 200
    with database(client) as session:
        second = users.issue_token(session, "alice")
        users.revoke_user(session, "alice")
    for headers in (alice, bearer(second)):
        assert client.get("/api/runs", headers=headers).status_code == 401
    assert bare.get("/api/runs").status_code == 401
    runs = client.get(f"/api/runs?experiment_id={created['id']}").json()
    assert runs["count"] == 3 and {run["owner"] for run in runs["data"]} == {"alice"}


def test_those_shared_with_view_only_the_owner_or_an_admin_changes(client, quick_settings):
    alice, bob = add(client, "alice"), add(client, "bob")
    created = submit(client, alice)
    run_id = created["runs"][0]["id"]
    assert created["owner"] == "alice" and created["runs"][0]["owner"] == "alice"
    # Private at first: to Bob it does not exist (tests/server/api/test_sharing.py walks every route).
    assert client.get(f"/api/runs/{run_id}", headers=bob).status_code == 404
    shared = client.put(f"/api/experiments/{created['id']}/sharing", json={"with": "everyone"}, headers=alice)
    assert shared.status_code == 200, shared.text
    # Shared, Bob sees everything of Alice's, and may clone it (the clone is his), but not change it.
    assert client.get(f"/api/runs/{run_id}", headers=bob).status_code == 200
    assert client.get(f"/api/experiments/{created['id']}/compare", headers=bob).status_code == 200
    response = client.post(f"/api/runs/{run_id}/cancel", headers=bob)
    assert response.status_code == 403
    assert response.json()["detail"] == f"run {run_id} is alice's to change: only its owner or an admin may"
    for method, url in [
        ("POST", f"/api/experiments/{created['id']}/cancel"),
        ("POST", f"/api/experiments/{created['id']}/resubmit"),
        ("POST", f"/api/experiments/{created['id']}/rerun"),
        ("POST", f"/api/runs/{run_id}/resubmit"),
        ("POST", f"/api/runs/{run_id}/rerun"),
        ("DELETE", f"/api/runs/{run_id}"),
        ("DELETE", f"/api/experiments/{created['id']}"),
    ]:
        assert client.request(method, url, headers=bob).status_code == 403, url
    clone = client.post(f"/api/experiments/{created['id']}/clone", json={"name": "bob's"}, headers=bob)
    assert clone.status_code == 201 and clone.json()["owner"] == "bob"
    # Alice and the admin may.
    assert client.post(f"/api/experiments/{created['id']}/cancel", headers=alice).status_code in (202, 409)
    assert client.post(f"/api/experiments/{clone.json()['id']}/cancel").status_code in (202, 409)
    # Filtered by owner.
    assert client.get("/api/runs?owner=bob").json()["count"] == 3
    assert client.get("/api/experiments?owner=alice").json()["count"] == 1


def set_state(client: TestClient, state: RunState, *run_ids: str) -> None:
    """As the monitor would record it (tests drive no monitor)."""
    with database(client) as session:
        for run in session.exec(select(Run)).all():
            if run.id in run_ids or not run_ids:
                run.state = state
                session.add(run)
        session.commit()


def test_delete_takes_ended_runs_with_everything_they_left(client):
    alice = add(client, "alice")
    created = submit(client, alice)
    live, ended = created["runs"][0], created["runs"][1]
    set_state(client, RunState.running, live["id"])
    response = client.delete(f"/api/experiments/{created['id']}", headers=alice)
    assert response.status_code == 409 and "cancel them first" in response.json()["detail"]
    assert client.delete(f"/api/runs/{live['id']}", headers=alice).status_code == 409
    set_state(client, RunState.failed, ended["id"])
    assert client.delete(f"/api/runs/{ended['id']}", headers=alice).status_code == 204
    assert client.get(f"/api/runs/{ended['id']}").status_code == 404
    assert not Path(ended["run_dir"]).exists()
    set_state(client, RunState.cancelled)
    assert client.delete(f"/api/experiments/{created['id']}").status_code == 204  # the admin
    assert counts(client) == (0, 0)
    assert not any(Path(run["run_dir"]).exists() for run in created["runs"])


@pytest.mark.parametrize(
    ("quota", "message"),
    [
        ({"max_concurrent_runs": 4}, "alice may have 4 runs not yet ended; 3 are, and this adds 3"),
        ({"max_gpus_in_use": 8}, "alice may use 8 GPUs at once; runs not yet ended hold 7, and this asks for 7 more"),
        ({"max_runs_per_day": 5}, "alice may create 5 runs in 24 hours; 3 were, and this adds 3: try again in 23 h"),
    ],
)
def test_quotas_refuse_before_anything_is_written(client, quota, message):
    alice = add(client, "alice", quotas=users.Quotas(**quota))
    first = submit(client, alice)
    set_state(client, RunState.running)  # the first three stay live
    before = counts(client)
    response = client.post("/api/experiments", json=experiment_request(), headers=alice)
    assert response.status_code == 429
    assert message in response.json()["detail"] and "Nothing was submitted" in response.json()["detail"]
    assert counts(client) == before
    assert ("retry-after" in response.headers) == ("max_runs_per_day" in quota)
    # The admin's own runs are not alice's: another user's quota is untouched.
    submit(client)
    assert first["owner"] == "alice"


def test_server_wide_quota_applies_to_users_without_their_own(quick_settings):
    settings = quick_settings.model_copy(update={"max_gpus_in_use": 2})
    with local_client(settings) as client:
        carol = add(client, "carol")
        response = client.post("/api/experiments", json=experiment_request(), headers=carol)
        assert response.status_code == 429 and "carol may use 2 GPUs at once" in response.json()["detail"]
        dave = add(client, "dave", quotas=users.Quotas(max_gpus_in_use=100))
        submit(client, dave)


def test_a_users_slurm_account_goes_into_their_scripts(client):
    erin = add(client, "erin", slurm_account="proj_42")
    script = client.post("/api/experiments/preview", json=experiment_request(), headers=erin).json()["script"]
    assert "#SBATCH --account=proj_42" in script
    assert "--account" not in client.post("/api/experiments/preview", json=experiment_request()).json()["script"]


def sign_in(client: TestClient, **form: str) -> TestClient:
    browser = anonymous(client)
    response = browser.post("/login", data={"next": "/runs", **form}, follow_redirects=False)
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/runs"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    return browser


def test_a_browser_session_needs_the_csrf_token_to_change_anything(client):
    add(client, "alice", password=PASSWORD)
    browser = sign_in(client, name="alice", password=PASSWORD)
    page = browser.get("/runs")
    assert page.status_code == 200 and 'id="signed-in-as">alice<' in page.text
    with database(client) as session:
        csrf = session.exec(select(WebSession.csrf_token)).one()
    assert f'<meta name="csrf-token" content="{csrf}">' in page.text
    # Another site's page can make the browser send the cookie, but cannot read the token.
    response = browser.post("/api/experiments", json=experiment_request())
    assert response.status_code == 403 and CSRF_HEADER in response.json()["detail"]
    assert (
        browser.post("/api/experiments", json=experiment_request(), headers={CSRF_HEADER: "guess"}).status_code == 403
    )
    assert counts(client) == (0, 0)
    created = browser.post("/api/experiments", json=experiment_request(), headers={CSRF_HEADER: csrf})
    assert created.status_code == 201 and created.json()["owner"] == "alice"
    # Signing out needs the token too, then the cookie is worthless.
    cookie = browser.cookies[SESSION_COOKIE]
    browser.post("/logout", data={"csrf": csrf})
    stolen = anonymous(client)
    stolen.cookies.set(SESSION_COOKIE, cookie)
    assert stolen.get("/api/runs").status_code == 401


def test_sign_in_with_a_token_and_refusals(client):
    token = add(client, "alice", password=PASSWORD)["Authorization"].removeprefix("Bearer ")
    assert sign_in(client, token=token).get("/api/runs").status_code == 200
    bare = anonymous(client)
    wrong = bare.post("/login", data={"name": "alice", "password": "not it at all"})
    nobody = bare.post("/login", data={"name": "nobody", "password": "not it at all"})
    assert wrong.status_code == nobody.status_code == 401
    assert "Wrong user name or password." in wrong.text and "Wrong user name or password." in nobody.text
    # A sign-in form posted from another site is refused (login CSRF), and `next` never leaves this site.
    forged = bare.post("/login", data={"name": "alice", "password": PASSWORD}, headers={"Origin": "http://evil.test"})
    assert forged.status_code == 401 and SESSION_COOKIE not in forged.cookies
    for target in ("//evil.test/x", "http://evil.test/", "javascript:alert(1)"):
        response = bare.post(
            "/login", data={"name": "alice", "password": PASSWORD, "next": target}, follow_redirects=False
        )
        assert response.headers["location"] == "/", target


def test_an_expired_session_is_signed_out(client):
    add(client, "alice", password=PASSWORD)
    browser = sign_in(client, name="alice", password=PASSWORD)
    with database(client) as session:
        web_session = session.exec(select(WebSession)).one()
        web_session.expires_at = utcnow() - timedelta(seconds=1)
        session.add(web_session)
        session.commit()
    assert browser.get("/api/runs").status_code == 401


def test_without_authentication_everyone_is_the_local_admin(settings, local_scheduler):
    unauthenticated = settings.model_copy(update={"auth": False, "worker_python": TRUE})
    with TestClient(
        create_app(unauthenticated, local_scheduler, start_monitor=False), base_url="http://127.0.0.1"
    ) as client:
        created = submit(client)
        assert created["owner"] == "local"
        with database(client) as session:
            local = session.get(User, "local")
            assert local is not None and local.is_admin
        assert client.get("/login", follow_redirects=False).headers["location"] == "/"


def test_the_first_requests_at_once_on_a_new_database_all_act_as_the_local_admin(tmp_path, database_url):
    """Each of them finds no user `local` and makes one: one insert wins, the others read its row (before, they
    got a 500 from the unique key)."""
    env = {"SCALELAB_DATABASE_URL": database_url, "SCALELAB_WORKER_PYTHON": str(TRUE)}
    with running_server(tmp_path, "local", env, args=["--workers", "2"]) as url:
        start = threading.Barrier(24)

        def first_request() -> int:
            start.wait()
            return httpx.get(f"{url}/api/experiments", timeout=60).status_code

        with ThreadPoolExecutor(max_workers=24) as pool:
            statuses = list(pool.map(lambda _: first_request(), range(24)))
    assert statuses == [200] * 24, (statuses, (tmp_path / "server.log").read_text()[-3000:])


# ---- a user's own tokens ----


def basic(name: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()}


def test_a_password_makes_a_token_that_works_and_is_shown_once(client: TestClient) -> None:
    add(client, "alice", password=PASSWORD)
    made = anonymous(client).post("/api/tokens", headers=basic("alice", PASSWORD))
    assert made.status_code == 201, made.text
    secret = made.json()["token"]
    headers = {"Authorization": f"Bearer {secret}"}
    assert anonymous(client).get("/api/experiments", headers=headers).status_code == 200
    listed = anonymous(client).get("/api/tokens", headers=headers).json()
    # The first token (made with the account) and this one; no secret or hash in the list.
    assert listed["count"] == 2
    assert made.json()["id"] in {token["id"] for token in listed["data"]}
    assert secret not in str(listed) and "hash" not in str(listed)


def test_wrong_or_malformed_credentials_make_no_token(client: TestClient) -> None:
    add(client, "alice", password=PASSWORD)
    for headers in (
        basic("alice", "not her password"),
        basic("nobody", PASSWORD),
        {"Authorization": "Basic %%%not-base64"},
        {"Authorization": "Basic " + base64.b64encode(b"\xff\xfe:x").decode()},
        {},
    ):
        answer = anonymous(client).post("/api/tokens", headers=headers)
        assert answer.status_code == 401, (headers, answer.text)


def test_a_revoked_token_stops_working_and_only_its_owner_may_revoke_it(client: TestClient) -> None:
    alice = add(client, "alice", password=PASSWORD)
    bob = add(client, "bob")
    token = client.post("/api/tokens", headers=alice).json()
    by_token = {"Authorization": f"Bearer {token['token']}"}
    assert anonymous(client).delete(f"/api/tokens/{token['id']}", headers=bob).status_code == 404
    assert anonymous(client).get("/api/experiments", headers=by_token).status_code == 200
    revoked = anonymous(client).delete(f"/api/tokens/{token['id']}", headers=alice)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert anonymous(client).get("/api/experiments", headers=by_token).status_code == 401
