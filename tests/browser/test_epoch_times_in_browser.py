"""The time of each epoch, one line per run, on the dashboard and on a run's page: a run slowed for a while shows at a
glance, where the medians of the other charts hide it."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ARTIFACTS, screenshot
from tests.browser.test_charts_in_browser import imported

pytestmark = [pytest.mark.browser, pytest.mark.slurm]

# A baseline disturbed at its second epoch (issue 31: 0.6 -> 3.4 -> 0.1 s), and two steady runs.
TIMES = {1: [0.6, 3.4, 0.1], 2: [0.4, 0.3, 0.3], 4: [0.3, 0.2, 0.2]}


def course_log(gpus: int, times: list[float]) -> str:
    lines = [f"[METRIC] gpus={gpus} world_size={gpus} strategy=ddp"]
    lines += [f"[METRIC] epoch={n} loss={1 / (n + 1):.4f} time={time}" for n, time in enumerate(times, start=1)]
    return "\n".join(lines) + "\n"


def drawn(page: Page, chart: str) -> list[dict]:
    """Each line plotly drew: its name and points."""
    lines: list[dict] = page.evaluate(
        "id => document.getElementById(id).data.map((t) => ({name: t.name, x: [...t.x], y: [...t.y]}))", chart
    )
    return lines


def test_the_dashboard_and_the_run_page_draw_each_runs_epoch_times(page: Page, server: str):
    logs = {f"ddp_{gpus}gpu.out": course_log(gpus, times) for gpus, times in TIMES.items()}
    experiment = imported(server, "a disturbed baseline", logs)
    page.goto(f"{server}/experiments/{experiment}")
    expect(page.locator("#charts")).to_have_attribute("data-ready", "final", timeout=30_000)
    lines = drawn(page, "chart-epoch-times")
    assert len(lines) == len(TIMES), lines  # one line per run
    assert sorted(line["y"] for line in lines) == sorted(TIMES.values())
    assert all(line["x"] == [1, 2, 3] for line in lines)
    expect(page.locator("#chart-epoch-times .legend .traces")).to_have_count(len(TIMES))
    page.locator("#chart-epoch-times").screenshot(path=ARTIFACTS / "epoch-times.png")
    screenshot(page, "dashboard-epoch-times")

    runs = httpx.get(f"{server}/api/runs", params={"experiment_id": experiment}, timeout=10).json()["data"]
    (baseline,) = [run for run in runs if run["spec"]["gpus"] == 1]
    page.goto(f"{server}/runs/{baseline['id']}")
    page.wait_for_function("document.getElementById('chart-run-epoch-times').data?.[0]?.x.length === 3")
    assert drawn(page, "chart-run-epoch-times") == [{"name": f"run {baseline['id']}", "x": [1, 2, 3], "y": TIMES[1]}]
