"""Signing in and out in a real browser, on a server with authentication on; the form submits with the CSRF token."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect
from sqlmodel import Session

from benches.server_process import running_server
from server.db import init_db, make_engine
from server.services import users
from tests.browser.conftest import accessibility_violations, screenshot
from tests.conftest import bearer
from tests.notify_receivers import webhook_receiver

pytestmark = [pytest.mark.browser, pytest.mark.slurm]

PASSWORD = "a long enough password"  # noqa: S105 (a test user's)


@pytest.fixture(scope="module")
def signed_server(slurm: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A server that asks everyone to sign in, with the user alice; its URL and the admin's token."""
    directory = tmp_path_factory.mktemp("signin")
    engine = make_engine(f"sqlite:///{directory / 'scalelab.db'}")
    init_db(engine)
    with Session(engine) as session:
        users.add_user(session, "alice", password=PASSWORD)
    engine.dispose()
    # Webhooks to this machine allowed: the account page's test notification goes to a local receiver.
    webhooks = {"SCALELAB_WEBHOOK_ALLOW": "127.0.0.1", "SCALELAB_WEBHOOK_ALLOW_PRIVATE": "true"}
    with running_server(
        directory, "slurm", {"SCALELAB_AUTH": "true", "SCALELAB_WEBHOOK_ALLOW_HTTP": "true", **webhooks}
    ) as url:
        # alice exists, so the first start made no admin: make one as an operator would.
        with Session(make_engine(f"sqlite:///{directory / 'scalelab.db'}")) as session:
            token = users.add_user(session, "root", is_admin=True)
        try:
            yield url, token
        finally:
            for experiment in httpx.get(f"{url}/api/experiments", headers=bearer(token), timeout=10).json()["data"]:
                httpx.post(f"{url}/api/experiments/{experiment['id']}/cancel", headers=bearer(token), timeout=30)


def test_sign_in_submit_and_sign_out(page: Page, signed_server: tuple[str, str]):
    url, admin = signed_server
    page.goto(f"{url}/runs?state=failed")
    expect(page).to_have_url(re.compile(r"/login\?next="))
    page.fill("#login-name", "alice")
    page.fill("#login-password", "not the password")
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_contain_text("Wrong user name or password.")
    expect(page.locator("#login-name")).to_have_value("alice")
    screenshot(page, "login-refused")
    assert accessibility_violations(page) == [], "the sign-in page, refused"

    page.fill("#login-password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{url}/runs?state=failed")
    expect(page.locator("#signed-in-as")).to_have_text("alice")

    # The form's requests carry the page's CSRF token: the submission goes through, as alice's.
    page.goto(f"{url}/experiments/new")
    page.fill("#x-name", "signed in")
    page.fill("#g-gpus", "1")
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 1 run.")
    page.click("#submit-button")
    page.wait_for_url("**/runs?experiment=*")
    experiment_id = page.url.rsplit("=", 1)[1]
    created = httpx.get(f"{url}/api/experiments/{experiment_id}", headers=bearer(admin), timeout=10).json()
    assert created["owner"] == "alice"
    expect(page.locator("tr[data-run] td").nth(2)).to_have_text("alice")
    screenshot(page, "runs-signed-in")

    page.click("text=Sign out")
    expect(page).to_have_url(re.compile(r"/login$"))
    page.goto(f"{url}/runs")
    expect(page).to_have_url(re.compile(r"/login\?next="))


def test_sign_in_with_an_api_token(page: Page, signed_server: tuple[str, str]):
    url, admin = signed_server
    page.goto(f"{url}/login")
    page.fill("#login-token", admin)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{url}/")
    expect(page.locator("#signed-in-as")).to_have_text("root (admin)")
    assert Path(screenshot(page, "home-signed-in")).exists()


def test_the_account_page_sets_notifications_and_sends_a_test(page: Page, signed_server: tuple[str, str]):
    url, admin = signed_server
    page.goto(f"{url}/login")
    page.fill("#login-token", admin)
    page.click("button[type=submit]")
    page.click("#signed-in-as")
    expect(page).to_have_url(f"{url}/account")
    expect(page.locator("#notify-email")).to_be_disabled()  # no mail host on this server
    page.click("#notify-test")
    expect(page.locator("#notify-status")).to_contain_text("set an e-mail address or a webhook URL first")
    page.fill("#notify-webhook", "http://10.0.0.1/hook")
    page.check("input[value=run_failed]")
    page.click("#notify-form button[type=submit]")
    expect(page.locator("#notify-status")).to_contain_text("webhook_url: ")
    expect(page.locator("#notify-status")).to_contain_text("SCALELAB_WEBHOOK_ALLOW")
    with webhook_receiver() as receiver:
        page.fill("#notify-webhook", receiver.url)
        page.click("#notify-form button[type=submit]")
        expect(page.locator("#notify-status")).to_have_text("Saved.")
        page.click("#notify-test")
        expect(page.locator("#notify-status")).to_have_text("A test notification is queued.")
        expect(page.locator("#deliveries-body tr")).to_have_count(1)
        # Sent by the server's delivery loop; the page shows it delivered once reloaded.
        for _ in range(60):
            page.reload()
            if page.locator("#deliveries-body td", has_text="delivered").count():
                break
            page.wait_for_timeout(500)
        expect(page.locator("#deliveries-body td").nth(3)).to_have_text("delivered")
        assert receiver.bodies and "a test notification for root" in receiver.bodies[0]["text"]
    expect(page.locator("input[value=run_failed]")).to_be_checked()
    screenshot(page, "account-notifications")
    assert accessibility_violations(page) == [], "the account page"
