"""The run page of a hung run: the watchdog's verdict, and every rank's stacks, each collapsible, shown as text
(a dump is the job's: markup in it stays text)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from contract.records import format_record
from contract.rundir import STACKS_DIR, stacks_name
from tests.browser.conftest import accessibility_violations, screenshot
from tests.factories import epoch, start

pytestmark = [pytest.mark.browser, pytest.mark.slurm]

VERDICT = "rank 1: not where the others are, at train.py:212 in main; rank 0 in all_reduce (torch/distributed/x.py:9)"
WAITING = (
    "Current thread 0x00007f00000000aa (most recent call first):\n"
    '  File "/venv/lib/python3.12/site-packages/torch/distributed/x.py", line 9 in all_reduce\n'
    '  File "/home/u/train.py", line 215 in main\n'
)
# A job may write anything into its file: this must show as the characters it is.
HOSTILE = (
    "Current thread 0x00007f00000000bb (most recent call first):\n"
    '  File "/home/u/<img src=x onerror=alert(1)>.py", line 212 in main\n'
)


def test_a_hung_runs_verdict_and_stacks(page: Page, server: str):
    lines = [format_record(start().model_copy(update={"world_size": 2})), format_record(epoch(1, 3))]
    files = [{"name": "hung.out", "content": "\n".join(lines) + "\n"}]
    created = httpx.post(f"{server}/api/imports", json={"name": "hung", "files": files}, timeout=10)
    assert created.status_code == 201, created.text
    (run,) = created.json()["runs"]
    folder = Path(run["run_dir"]) / STACKS_DIR
    folder.mkdir(parents=True)
    (folder / stacks_name(0)).write_text(WAITING)
    (folder / stacks_name(1)).write_text(HOSTILE)

    # The watchdog's outcome as the run's answers carry it (an imported run is never watched).
    def hung(route: Route) -> None:
        response = route.fetch()
        extra = {"state": "failed", "failure_kind": "hung", "failure_detail": VERDICT, "stalled_at": run["created_at"]}
        route.fulfill(response=response, json=response.json() | extra)

    def verdict(route: Route) -> None:
        response = route.fetch()
        route.fulfill(response=response, json=response.json() | {"verdict": VERDICT})

    page.route(f"**/api/runs/{run['id']}", hung)
    page.route(f"**/api/runs/{run['id']}/stacks", verdict)
    page.goto(f"{server}/runs/{run['id']}")
    section = page.locator("#hang")
    expect(section).to_be_visible()
    expect(page.locator("#hang-verdict")).to_contain_text(VERDICT)
    expect(page.locator("#hang-verdict")).to_contain_text("cancelled once its stacks were read")
    ranks = section.locator("details")
    expect(ranks).to_have_count(2)
    expect(ranks.nth(0).locator("pre")).not_to_be_visible()  # collapsed until asked for
    ranks.nth(1).locator("summary").click()
    expect(ranks.nth(1).locator("pre")).to_have_text(HOSTILE)
    assert section.locator("img").count() == 0
    assert not accessibility_violations(page)
    screenshot(page, "run-hung")


def test_a_run_that_never_stalled_shows_no_hang(page: Page, server: str):
    files = [{"name": "fine.out", "content": format_record(start()) + "\n"}]
    (run,) = httpx.post(f"{server}/api/imports", json={"name": "fine", "files": files}, timeout=10).json()["runs"]
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if "/stacks" in request.url else None)
    page.goto(f"{server}/runs/{run['id']}")
    expect(page.locator("#run-state")).to_have_text("completed")
    expect(page.locator("#hang")).to_be_hidden()
    assert not asked
