"""A real server on the real local Slurm, and Debian's chromium driven by playwright; screenshots kept as artifacts."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REQUIRE_SLURM, serving
from tests.factories import ROOT

try:
    from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - the dev extra brings it
    sync_playwright = None  # type: ignore[assignment]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The flags that let Debian's chromium run headless as root in a container with no GPU and no network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
# Deque's accessibility engine, pinned in tests/browser/package.json; scripts/test installs it with npm ci.
AXE = ROOT / "tests" / "browser" / "node_modules" / "axe-core" / "axe.min.js"


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Skip where there is no browser to drive, but fail where the suite was told it must run everything (CI)."""
    if sync_playwright is None or not Path(CHROMIUM).exists():
        message = "the browser tests need playwright (the dev extra) and Debian's chromium (scripts/test installs it)"
        if REQUIRE_SLURM:
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def server(slurm: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server for a module's tests."""
    with serving(tmp_path_factory.mktemp("browser")) as url:
        yield url


@contextlib.contextmanager
def checked_page(browser: Browser, *, bypass_csp: bool) -> Iterator[Page]:
    """A fresh page; a script error on it fails the test (a 4xx answer the page expects is not one)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True, bypass_csp=bypass_csp)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    def console(message: ConsoleMessage) -> None:
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            errors.append(message.text)

    page.on("console", console)
    yield page
    context.close()
    assert not errors, f"errors in the page: {errors}"


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page for the tests of what the pages do. Playwright's own helpers evaluate strings in the page
    (wait_for_function) and add axe-core as an inline script, which the pages' Content-Security-Policy refuses, as
    it should: these pages leave the policy aside. policed_page keeps it (test_security_policy_in_browser.py)."""
    with checked_page(browser, bypass_csp=True) as page:
        yield page


@pytest.fixture
def policed_page(browser: Browser) -> Iterator[Page]:
    """A fresh page under the pages' Content-Security-Policy."""
    with checked_page(browser, bypass_csp=False) as page:
        yield page


# How long a dashboard may take to draw its charts from the server's answers. A few seconds on a quiet machine; a
# CI run's load (about 10 runnable processes on 2 cores) has made it take more than 30 s. What it guards against, a
# chart that is never marked final, is not a matter of seconds.
CHARTS_FINAL_MS = 90_000


def charts_final(page: Page, timeout_ms: int = CHARTS_FINAL_MS) -> None:
    """Wait until the dashboard's charts are drawn from the final answers (#charts data-ready="final")."""
    expect(page.locator("#charts")).to_have_attribute("data-ready", "final", timeout=timeout_ms)


def screenshot(page: Page, name: str) -> Path:
    """Keep a picture of the page under test-artifacts/browser/, named by what it shows."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=path, full_page=True)
    print(f"screenshot: {path}")  # noqa: T201 - tells the reader of the test log where to look
    return path


def accessibility_violations(page: Page) -> list[str]:
    """What axe-core finds wrong with the page as it stands now, one line per rule and element, worst first."""
    if not AXE.exists():
        message = f"the accessibility checks need axe-core ({AXE.relative_to(ROOT)}): scripts/test installs it"
        if REQUIRE_SLURM:
            pytest.fail(message)
        pytest.skip(message)
    if not page.evaluate("typeof window.axe === 'object'"):
        page.add_script_tag(path=AXE)
    results = page.evaluate("async () => (await axe.run(document)).violations")
    order = {"critical": 0, "serious": 1, "moderate": 2, "minor": 3}
    return [
        f"{violation['id']} ({violation['impact']}): {node['target']} {violation['help']}"
        for violation in sorted(results, key=lambda violation: order.get(violation["impact"], 4))
        for node in violation["nodes"]
    ]
