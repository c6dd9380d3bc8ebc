"""Every page under its Content-Security-Policy in a real browser: nothing it needs is refused (its module mounts
carry the request's nonce, plotly draws its charts), and /docs renders with no network beyond the server."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, expect

from tests.factories import course_log

pytestmark = [pytest.mark.browser, pytest.mark.slurm]

# Each refusal the browser makes under the policy, kept on the page from before its first script.
LISTEN = """
window.__refused = [];
document.addEventListener('securitypolicyviolation', (event) => {
  window.__refused.push(`${event.violatedDirective} ${event.blockedURI} ${event.sample}`);
});
"""


@pytest.fixture(scope="module")
def imported(server: str) -> dict[str, str]:
    logs = [{"name": f"run_{gpus}gpu.out", "content": course_log(gpus)} for gpus in (1, 2)]
    created = httpx.post(f"{server}/api/imports", json={"name": "policed", "files": logs}, timeout=30)
    assert created.status_code == 201, created.text
    experiment = created.json()["id"]
    runs = httpx.get(f"{server}/api/runs", params={"experiment_id": experiment}, timeout=10).json()["data"]
    return {"experiment": experiment, "run": runs[0]["id"], "other": runs[1]["id"]}


def refused(page: Page) -> list[str]:
    found: list[str] = page.evaluate("window.__refused")
    return found


def test_every_page_runs_under_its_policy_without_a_refusal(policed_page: Page, server: str, imported: dict[str, str]):
    page = policed_page
    page.add_init_script(LISTEN)
    pages = {
        "/": "#main",
        "/experiments/new": "#preview-status",
        "/runs": "#main",
        f"/runs/{imported['run']}": "#chart-run-loss .main-svg",
        f"/experiments/{imported['experiment']}": "#chart-epoch-time .main-svg",
        f"/compare?run={imported['run']}&run={imported['other']}": "#chart-epoch-time .main-svg",
    }
    for path, drawn in pages.items():
        answer = page.goto(f"{server}{path}")
        assert answer is not None and answer.status == 200, path
        policy = answer.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "'unsafe-eval'" not in policy
        assert answer.headers["x-content-type-options"] == "nosniff"
        expect(page.locator(drawn).first).to_be_attached()
        page.wait_for_load_state("networkidle")
        assert refused(page) == [], path
    # The mount scripts ran (the nonce let them): the form filled its preview from the API.
    page.goto(f"{server}/experiments/new")
    expect(page.locator("#preview-status")).to_contain_text("This experiment creates")


def test_an_injected_inline_script_is_refused(browser: Browser, server: str):
    """The policy works: a script without the nonce (what an injection would be) does not run. (A page of its own:
    the browser reports the refusal as an error, which the `page` fixture fails on.)"""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.add_init_script(LISTEN)
        page.goto(f"{server}/runs")
        page.evaluate(
            "() => { const s = document.createElement('script'); s.textContent = 'window.__ran = true';"
            " document.body.append(s); }"
        )
        assert page.evaluate("window.__ran === undefined")
        assert any(entry.startswith("script-src") for entry in refused(page))
    finally:
        context.close()


def test_docs_render_offline_from_the_server_itself(policed_page: Page, server: str):
    page = policed_page
    own = urlsplit(server).netloc
    elsewhere: list[str] = []

    def only_the_server(route: Route) -> None:
        if urlsplit(route.request.url).netloc == own:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.context.route("**/*", only_the_server)
    page.add_init_script(LISTEN)
    page.goto(f"{server}/docs")
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible(timeout=30_000)
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("scalelab")
    page.wait_for_load_state("networkidle")
    assert elsewhere == []
    assert refused(page) == []
