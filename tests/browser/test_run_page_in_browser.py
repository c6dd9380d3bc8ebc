"""The run page of a run that was requeued and resumed from a checkpoint: its curves and its progress show the
epochs the server counts, and it stops asking once the run has ended and its output is read."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, Request, Route, expect

from contract.records import METRIC_PREFIX, ResumeRecord, WorkerRecord, format_record
from tests.browser.conftest import screenshot
from tests.browser.test_pages_in_browser import chart_traces
from tests.factories import epoch, start

pytestmark = [pytest.mark.browser, pytest.mark.slurm]


def resumed_log() -> str:
    """A log made without a GPU: the first job printed epochs 1-3 and was requeued; the second resumed from epoch
    1's checkpoint and printed epochs 2 and 3 again, faster. Only its prints of them count."""
    records: list[WorkerRecord] = [start(), epoch(1, 30, loss=3.0), epoch(2, 20, loss=2.0), epoch(3, 20, loss=1.5)]
    records += [start(), ResumeRecord(epoch=1), epoch(2, 3, loss=1.2), epoch(3, 5, loss=1.0)]
    # A course script's line naming the epochs asked for: the imported run's spec has 5.
    return "\n".join([f"{METRIC_PREFIX} epochs=5", *map(format_record, records)]) + "\n"


def test_a_resumed_run_shows_the_epochs_that_count(page: Page, server: str):
    files = [{"name": "resumed.out", "content": resumed_log()}]
    created = httpx.post(f"{server}/api/imports", json={"name": "resumed", "files": files}, timeout=10)
    assert created.status_code == 201, created.text
    (run,) = created.json()["runs"]
    run_id = run["id"]

    # As if it were still running: the time left is for epochs 4 and 5 at the mean of the counted epochs after the
    # first (3 s and 5 s; epoch 1 pays for warm-up, the first job's epochs 2 and 3 no longer count).
    def running(route: Route) -> None:
        response = route.fetch()
        route.fulfill(response=response, json=response.json() | {"state": "running", "ingest_done": False})

    page.route(f"**/api/runs/{run_id}", running)
    page.goto(f"{server}/runs/{run_id}")
    expect(page.locator("#run-state")).to_have_text("running")
    expect(page.locator("#run-progress")).to_have_text("epoch 4 of 5, about 8 s left")
    page.wait_for_function("document.getElementById('chart-run-loss').data?.[0]?.x.length === 3")
    loss = chart_traces(page, "run-loss")["train loss"]
    assert (loss["x"], loss["y"]) == ([1, 2, 3], [3.0, 1.2, 1.0])
    screenshot(page, "run-resumed-running")
    page.unroute(f"**/api/runs/{run_id}")

    # As it is: ended, and every line read, so one look at its figures is all the page needs.
    asked: list[str] = []

    def count(request: Request) -> None:
        if "/api/compare" in request.url:
            asked.append(request.url)

    page.on("request", count)
    page.reload()
    expect(page.locator("#run-state")).to_have_text("completed")
    expect(page.locator("#log")).to_contain_text('"kind":"resume"')
    page.wait_for_function("document.getElementById('chart-run-loss').data?.[0]?.x.length === 3")
    assert chart_traces(page, "run-loss")["train loss"]["y"] == [3.0, 1.2, 1.0]
    expect(page.locator("#run-progress")).to_have_text("3 of 5 epochs")
    page.wait_for_timeout(5_000)  # two and a half polling intervals
    assert len(asked) == 1, asked
    screenshot(page, "run-resumed")
