"""A Unix user signs in with her password through PAM in a real browser and shares an experiment from its page
(the form sends the page's CSRF token); another sees it read-only, and then not at all once it is private again."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from benches.server_process import running_server
from tests.browser.conftest import screenshot
from tests.factories import experiment_request
from tests.unix_users import STUDY_GROUP, TEST_SERVICE, USERS_GROUP, password_of

pytestmark = [pytest.mark.browser, pytest.mark.slurm]


@pytest.fixture(scope="module")
def pam_server(slurm: None, unix_people: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("pam")
    env = {
        "SCALELAB_AUTH": "true",
        "SCALELAB_SIGNIN": "pam",
        "SCALELAB_PAM_SERVICE": TEST_SERVICE,
        "SCALELAB_ALLOWED_GROUP": USERS_GROUP,
    }
    with running_server(directory, "slurm", env) as url:
        yield url


def token_of(url: str, name: str) -> dict[str, str]:
    credentials = base64.b64encode(f"{name}:{password_of(name)}".encode()).decode()
    made = httpx.post(f"{url}/api/tokens", headers={"Authorization": f"Basic {credentials}"}, timeout=30)
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


def sign_in(page: Page, url: str, name: str, target: str) -> None:
    page.goto(f"{url}{target}")
    expect(page).to_have_url(re.compile(r"/login\?next="))
    page.fill("#login-name", name)
    page.fill("#login-password", password_of(name))
    page.click("button[type=submit]")
    expect(page.locator("#signed-in-as")).to_have_text(name)


def test_alice_shares_from_the_page_and_bob_sees_it_read_only(page: Page, pam_server: str):
    url = pam_server
    alice, bob = token_of(url, "sl-alice"), token_of(url, "sl-bob")
    request = experiment_request(name="alice's study", grid={"strategy": ["single"], "gpus": [1]})
    request["base"]["epochs"] = 1
    created = httpx.post(f"{url}/api/experiments", json=request, headers=alice, timeout=60).json()
    experiment = created["id"]
    try:
        assert httpx.get(f"{url}/api/experiments/{experiment}", headers=bob, timeout=30).status_code == 404

        sign_in(page, url, "sl-alice", f"/experiments/{experiment}")
        expect(page.locator("#who-sees")).to_have_text("sl-alice and the admins only")
        page.select_option("#sharing-with", "group")
        page.fill("#sharing-group", "sl-no-such-group")
        page.click("#sharing-form button[type=submit]")
        expect(page.locator("#sharing-status")).to_contain_text("no Unix group")
        page.fill("#sharing-group", STUDY_GROUP)
        page.click("#sharing-form button[type=submit]")
        expect(page.locator("#who-sees")).to_contain_text(f"the Unix group {STUDY_GROUP}")
        screenshot(page, "experiment-shared")

        shown = httpx.get(f"{url}/api/experiments/{experiment}", headers=bob, timeout=30)
        assert shown.status_code == 200 and shown.json()["sharing_group"] == STUDY_GROUP
        run = created["runs"][0]["id"]
        assert httpx.post(f"{url}/api/runs/{run}/cancel", headers=bob, timeout=30).status_code == 403

        page.select_option("#sharing-with", "private")
        page.click("#sharing-form button[type=submit]")
        expect(page.locator("#who-sees")).to_have_text("sl-alice and the admins only")
        assert httpx.get(f"{url}/api/experiments/{experiment}", headers=bob, timeout=30).status_code == 404
    finally:
        httpx.post(f"{url}/api/experiments/{experiment}/cancel", headers=alice, timeout=30)
