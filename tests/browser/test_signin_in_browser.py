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
    with running_server(directory, "slurm", {"SCALELAB_AUTH": "true"}) as url:
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
