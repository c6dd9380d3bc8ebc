"""Signing in with the login node's Unix accounts: real users, real PAM (the tests run as root, so pam_unix reads
/etc/shadow itself), the allowed and admin groups, and the same rules for the tokens of Unix users."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from server.api.deps import SESSION_COOKIE
from server.config import Settings
from server.models import User
from server.services import unix_accounts, users
from server.services.unix_accounts import Verdict
from tests.conftest import bearer, local_client
from tests.hostile import HOSTILE, LONG, json_safe
from tests.unix_users import ADMINS_GROUP, TEST_SERVICE, USERS_GROUP, password_of, sh

pytestmark = pytest.mark.usefixtures("unix_people")
LOCAL_PASSWORD = "a local passphrase"  # noqa: S105 (a test account's)


def pam_settings(settings: Settings, **changes: object) -> Settings:
    update = {
        "signin": "pam",
        "pam_service": TEST_SERVICE,
        "allowed_group": USERS_GROUP,
        "admin_group": ADMINS_GROUP,
        **changes,
    }
    return settings.model_copy(update=update)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    pam = pam_settings(settings)
    with local_client(pam) as client:
        yield client


def basic(name: str, password: str) -> dict[str, str]:
    return {
        "Authorization": "Basic " + base64.b64encode(f"{name}:{password}".encode("utf-8", "surrogatepass")).decode()
    }


def token_by_password(client: TestClient, name: str, password: str | None = None) -> tuple[int, str]:
    """Status and token (or the refusal) of POST /api/tokens with HTTP Basic, as `scalelab login` sends it."""
    answer = TestClient(client.app).post("/api/tokens", headers=basic(name, password or password_of(name)))
    body = answer.json()
    return answer.status_code, body.get("token") or body["detail"]


def row(client: TestClient, name: str) -> User | None:
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        return session.get(User, name)


def test_the_right_password_signs_a_unix_user_in_and_makes_their_row(client):
    code, token = token_by_password(client, "sl-alice")
    assert code == 201, token
    alice = row(client, "sl-alice")
    assert alice is not None and alice.unix and not alice.is_admin and alice.password_hash is None
    me = client.get("/api/tokens", headers=bearer(token))
    assert me.status_code == 200 and me.json()["count"] == 1


def test_wrong_unknown_and_locked_get_the_same_answer_and_expired_says_so(client):
    answers = {
        "wrong": token_by_password(client, "sl-alice", "not her password at all"),
        "unknown": token_by_password(client, "sl-nobody", "whatever it may be"),
        "locked": token_by_password(client, "sl-locked"),
    }
    assert {code for code, _ in answers.values()} == {401}
    assert len({detail for _, detail in answers.values()}) == 1, answers
    assert answers["wrong"][1] == "wrong user name or password"
    # Only someone whose password was right learns that their account expired.
    assert token_by_password(client, "sl-expired", "not the password") == answers["wrong"]
    code, detail = token_by_password(client, "sl-expired")
    assert code == 401 and "expired" in detail
    for name in ("sl-nobody", "sl-locked", "sl-expired"):
        assert row(client, name) is None


def test_only_the_allowed_group_signs_in_and_admin_group_makes_admins(client):
    code, detail = token_by_password(client, "sl-carol")
    assert code == 401 and "may not use scalelab" in detail
    assert row(client, "sl-carol") is None
    assert token_by_password(client, "sl-root")[0] == 201
    root = row(client, "sl-root")
    assert root is not None and root.is_admin


def test_a_token_stops_working_once_its_user_leaves_the_allowed_group(client):
    code, token = token_by_password(client, "sl-dave")
    assert code == 201
    browser = TestClient(client.app)
    assert browser.post("/login", data={"name": "sl-dave", "password": password_of("sl-dave")}).status_code == 200
    assert SESSION_COOKIE in browser.cookies
    assert client.get("/api/experiments", headers=bearer(token)).status_code == 200
    try:
        sh("gpasswd", "--delete", "sl-dave", USERS_GROUP)
        # Within the groups' lifetime the old answer stands; once it is forgotten the token and session end.
        assert client.get("/api/experiments", headers=bearer(token)).status_code == 200
        unix_accounts.forget_groups()
        refused = client.get("/api/experiments", headers=bearer(token))
        assert refused.status_code == 401 and "may no longer use scalelab" in refused.json()["detail"]
        assert browser.get("/api/experiments").status_code == 401
        assert token_by_password(client, "sl-dave")[0] == 401
    finally:
        sh("gpasswd", "--add", "sl-dave", USERS_GROUP)
        unix_accounts.forget_groups()
    assert client.get("/api/experiments", headers=bearer(token)).status_code == 200


def test_admin_rights_follow_admin_group_on_each_request(client):
    code, token = token_by_password(client, "sl-bob")
    assert code == 201
    assert client.get("/api/experiments", headers=bearer(token)).status_code == 200
    try:
        sh("gpasswd", "--add", "sl-bob", ADMINS_GROUP)
        unix_accounts.forget_groups()
        client.get("/api/experiments", headers=bearer(token))
        bob = row(client, "sl-bob")
        assert bob is not None and bob.is_admin
    finally:
        sh("gpasswd", "--delete", "sl-bob", ADMINS_GROUP)
        unix_accounts.forget_groups()
    client.get("/api/experiments", headers=bearer(token))
    bob = row(client, "sl-bob")
    assert bob is not None and not bob.is_admin


def test_the_sign_in_page_takes_a_unix_password(client):
    browser = TestClient(client.app)
    refused = browser.post("/login", data={"name": "sl-alice", "password": "not it"}, follow_redirects=False)
    assert refused.status_code == 401 and "Wrong user name or password." in refused.text
    signed = browser.post(
        "/login", data={"name": "sl-alice", "password": password_of("sl-alice")}, follow_redirects=False
    )
    assert signed.status_code == 303 and SESSION_COOKIE in browser.cookies
    assert 'id="signed-in-as">sl-alice<' in browser.get("/runs").text


def test_local_accounts_keep_their_own_passwords_and_pam_never_hears_of_them(client, monkeypatch):
    with Session(client.app.state.engine) as session:
        users.add_user(session, "sl-local", password=LOCAL_PASSWORD)
        # An admin made a scalelab account named like a Unix user: the name is that account's, not PAM's.
        users.add_user(session, "sl-erin", password=LOCAL_PASSWORD)
    asked: list[str] = []
    real = unix_accounts.check_password

    def spy(*args: str) -> unix_accounts.PamAnswer:
        asked.append(args[1])
        return real(*args)

    monkeypatch.setattr(unix_accounts, "check_password", spy)
    assert token_by_password(client, "sl-local", LOCAL_PASSWORD)[0] == 201
    assert token_by_password(client, "sl-erin", LOCAL_PASSWORD)[0] == 201
    assert token_by_password(client, "sl-erin")[0] == 401  # her Unix password does not sign the local account in
    assert asked == []


def test_with_local_sign_in_a_unix_password_is_nothing(settings, client):
    assert token_by_password(client, "sl-alice")[0] == 201  # her row exists, as a Unix user
    local = settings.model_copy(update={"signin": "local"})
    with local_client(local) as other:
        assert token_by_password(other, "sl-alice")[0] == 401


HOSTILE_STRINGS = [item for item in HOSTILE if isinstance(item.value, str)]


@pytest.mark.parametrize("item", HOSTILE_STRINGS, ids=lambda item: item.name)
def test_hostile_names_never_reach_pam(client, monkeypatch, item):
    asked: list[str] = []
    monkeypatch.setattr(unix_accounts, "check_password", lambda *args: asked.append(args[1]))
    code, _ = token_by_password(client, item.value.replace(":", ";"), "some password")
    assert code == 401 and asked == []
    if json_safe(item.value):
        page = TestClient(client.app).post("/login", data={"name": item.value, "password": "some password"})
        assert page.status_code == 401 and asked == []


@pytest.mark.parametrize(
    "password", ["with a \0 inside", "x" * 4097, "é" * 2049, "x" * LONG], ids=["nul", "4097", "utf8_over", "long"]
)
def test_passwords_no_one_has_never_reach_pam(client, monkeypatch, password):
    asked: list[str] = []
    monkeypatch.setattr(unix_accounts, "check_password", lambda *args: asked.append(args[1]))
    assert token_by_password(client, "sl-alice", password)[0] == 401
    assert asked == []


def test_pam_itself_refuses_nul_and_overlong_passwords():
    assert unix_accounts.check_password(TEST_SERVICE, "sl-alice", "a\0b").verdict is Verdict.wrong
    assert unix_accounts.check_password(TEST_SERVICE, "sl-alice", "x" * 5000).verdict is Verdict.wrong
    assert unix_accounts.check_password(TEST_SERVICE, "sl-alice", "\ud800").verdict is Verdict.wrong


def test_the_products_pam_service_checks_a_password():
    """/etc/pam.d/scalelab as committed (with pam_unix's delay; a right password costs no delay)."""
    assert unix_accounts.check_password("scalelab", "sl-alice", password_of("sl-alice")).verdict is Verdict.ok


def test_a_missing_pam_service_is_an_error_not_a_wrong_password(settings):
    pam = pam_settings(settings, pam_service="scalelab-no-such-service")
    with local_client(pam) as client:
        code, detail = token_by_password(client, "sl-alice")
    assert code == 401 and "cannot be checked now" in detail


# How long PAM waits for the health check in the test below before giving up (the test then fails).
PAM_PATIENCE_S = 60.0


def test_pam_sign_ins_wait_off_the_event_loop(client):
    """While a sign-in waits on PAM, the server answers others. PAM here waits until the health check has been
    answered: were it waited on in the event loop, the health check could not be answered until PAM gave up. Both
    requests go through the same client, so through the same event loop (another TestClient would run its own)."""
    entered, answered = threading.Event(), threading.Event()
    waited: list[bool] = []
    real = unix_accounts.check_password

    def slow(*args: str) -> unix_accounts.PamAnswer:
        entered.set()
        waited.append(answered.wait(timeout=PAM_PATIENCE_S))
        return real(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(unix_accounts, "check_password", slow)
        signing = threading.Thread(
            target=client.post, args=("/login",), kwargs={"data": {"name": "sl-bob", "password": "x y z w"}}
        )
        signing.start()
        assert entered.wait(timeout=60), "the sign-in never reached PAM"
        assert client.get("/healthz").status_code == 200
        answered.set()
        signing.join()
    assert waited == [True], "the health check was answered only after PAM gave up: PAM blocked the event loop"


def test_group_lookups_are_kept_a_while(monkeypatch):
    unix_accounts.forget_groups()
    looked: list[str] = []
    real = unix_accounts._look_up_groups

    def spy(name: str) -> frozenset[str] | None:
        looked.append(name)
        return real(name)

    monkeypatch.setattr(unix_accounts, "_look_up_groups", spy)
    for _ in range(5):
        groups = unix_accounts.groups_of("sl-alice")
        assert groups is not None and USERS_GROUP in groups and "sl-alice" in groups
    assert looked == ["sl-alice"]
    assert unix_accounts.groups_of("sl-nobody") is None
    assert unix_accounts.is_unix_user("sl-alice") and not unix_accounts.is_unix_user("sl-nobody")
    assert not unix_accounts.is_unix_user("a\0b")
