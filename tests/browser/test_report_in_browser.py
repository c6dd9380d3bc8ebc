"""The saved report opened from disk in Chromium with no network: its charts are drawn, and it asks for nothing."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, Request, Route

from tests.browser.conftest import accessibility_violations, screenshot
from tests.server.services.test_report import render

pytestmark = [pytest.mark.browser]


def test_the_report_opens_offline_with_its_charts(page: Page, browser: Browser, tmp_path):
    path = tmp_path / "scalelab-0a1b2c3d4e-report.html"
    path.write_text(render(), encoding="utf-8")
    url = path.as_uri()
    asked: list[str] = []

    def only_the_file(route: Route) -> None:
        if route.request.url == url:
            route.continue_()
        else:
            route.abort()

    def seen(request: Request) -> None:
        if request.url != url:
            asked.append(request.url)

    page.context.set_offline(True)
    page.route("**/*", only_the_file)
    page.on("request", seen)
    page.goto(url)

    charts = page.locator("svg.chart")
    assert charts.count() == 3
    for index in range(3):
        box = charts.nth(index).bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 150
    # Each point drawn: 3 of the time chart, 3 of speed-up, 3 of efficiency; the 4-GPU one ringed in each.
    assert page.locator("svg.chart g.point").count() == 9
    assert page.locator("svg.chart g.point.flagged").count() == 3
    assert page.locator("#chart-speedup path").count() == 4  # measured, two fitted laws, ideal
    assert page.locator("h1").inner_text() == "cnn on cifar10, ddp"
    screenshot(page, "report-offline")
    assert asked == []

    # The report's own policy refuses every script, axe-core's too: it is checked in a page that sets that aside.
    checked = browser.new_context(bypass_csp=True, offline=True).new_page()
    checked.goto(url)
    assert accessibility_violations(checked) == []
    checked.context.close()
