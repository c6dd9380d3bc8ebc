"""The pages in a real browser against the real local Slurm: submit through the form, watch the runs, compare them."""

from __future__ import annotations

import csv
import io
import re
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import accessibility_violations, charts_final, screenshot
from tests.factories import course_log

pytestmark = [pytest.mark.browser, pytest.mark.slurm, pytest.mark.torch]

CHARTS = ["epoch-time", "speedup", "efficiency", "val-loss", "val-accuracy", "memory", "loss-curves"]


def chart_traces(page: Page, chart: str) -> dict[str, dict]:
    """Each trace of a chart by name, with its x values (what plotly holds on the chart's element)."""
    traces: list[dict] = page.evaluate(
        "id => document.getElementById(id).data.map(t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)}))",
        f"chart-{chart}",
    )
    return {trace["name"]: trace for trace in traces}


def test_invalid_input_shows_the_field_errors_and_creates_nothing(page: Page, server: str):
    page.goto(f"{server}/experiments/new")
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 3 runs.")

    # Caught in the page: a missing name, an epoch count below its bound.
    page.fill("#f-epochs", "0")
    page.click("#submit-button")
    expect(page.locator("#e-x-name")).to_have_text("give the experiment a name")
    expect(page.locator("#e-f-epochs")).to_have_text("must be at least 1, not 0")
    expect(page.locator("#f-epochs")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#error-summary")).to_be_focused()

    # Caught by the API: a time limit not in Slurm's form; then a batch that does not divide among the GPUs.
    page.fill("#x-name", "invalid")
    page.fill("#f-epochs", "2")
    page.fill("#r-time_limit", "10 minutes")
    page.click("#submit-button")
    expect(page.locator("#e-r-time_limit")).to_contain_text("a time limit looks like HH:MM:SS")
    expect(page.locator("#e-f-epochs")).to_be_hidden()
    expect(page.locator("#error-summary a[href='#r-time_limit']")).to_be_visible()

    page.fill("#r-time_limit", "00:05:00")
    page.fill("#f-global_batch_size", "65")
    page.click("#submit-button")
    expect(page.locator("#e-grid")).to_contain_text("global_batch_size (65) must be divisible by gpus (2)")
    expect(page.locator("#submit-status")).to_have_text("Nothing was submitted: fix the fields marked.")
    screenshot(page, "new-experiment-errors")

    assert httpx.get(f"{server}/api/experiments", timeout=10).json()["count"] == 0
    assert httpx.get(f"{server}/api/runs", timeout=10).json()["count"] == 0


def test_the_preview_shows_memory_estimates_and_marks_those_beyond_the_gpu(page: Page, server: str):
    """The local profile's partition declares no GPU memory, so the page is told of one run that exceeds it."""
    too_big = "estimated 90.00 GiB per GPU exceeds the partition's 80 GiB"

    def one_beyond(route: Route) -> None:
        response = route.fetch()
        preview = response.json()
        preview["estimates"][0]["warning"] = too_big
        route.fulfill(response=response, json=preview)

    page.route("**/api/experiments/preview*", one_beyond)
    page.goto(f"{server}/experiments/new")
    table = page.locator("#estimates-table")
    expect(table.locator("tbody tr")).to_have_count(3)
    headings = table.locator("thead th").all_text_contents()
    assert {"parameters", "gradients", "optimizer state", "activations", "Total per GPU"} <= set(headings), headings
    expect(table.locator("tbody tr.warning")).to_have_count(1)
    expect(table.locator("tbody tr.warning")).to_contain_text(too_big)
    total = table.locator("tbody tr").nth(1).locator("td").nth(headings.index("Total per GPU") - 1)
    expect(total).to_have_text(re.compile(r"^[\d.]+ (KiB|MiB)$"))
    expect(page.locator("#estimates-note")).to_contain_text("declares no GPU memory")
    screenshot(page, "new-experiment-estimates")


def test_submit_watch_compare_and_export(page: Page, server: str, tmp_path: Path):
    # The form: DDP and FSDP on 1 and 2 GPUs, previewed before submitting.
    page.goto(f"{server}/experiments/new")
    screenshot(page, "new-experiment")
    page.fill("#x-name", "browser sweep")
    page.check("#s-strategy")
    page.check("input[name='g-strategy'][value='fsdp']")
    page.fill("#g-gpus", "1, 2")
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 4 runs.")
    page.select_option("#preview-run", label="4: strategy=fsdp, gpus=2")
    expect(page.locator("#preview-script")).to_contain_text("#SBATCH --ntasks-per-node=2")
    screenshot(page, "new-experiment-preview")

    page.click("#submit-button")
    page.wait_for_url("**/runs?experiment=*")
    experiment_id = page.url.rsplit("=", 1)[1]
    rows = page.locator("tr[data-run]")
    expect(rows).to_have_count(4)

    # The runs page follows the states by itself: the marker set on this document survives to the end.
    page.evaluate("window.__sameDocument = true")
    seen: set[str] = set()
    deadline = time.monotonic() + 300
    shot_live = False
    while time.monotonic() < deadline:
        states = page.eval_on_selector_all("tr[data-run]", "rows => rows.map(r => r.dataset.state)")
        seen |= set(states)
        if "running" in states and not shot_live:
            screenshot(page, "runs-live")
            shot_live = True
        if set(states) == {"completed"}:
            break
        assert not {"failed", "cancelled", "timeout", "submit_failed"} & set(states), states
        time.sleep(0.5)
    assert set(states) == {"completed"}, states
    assert seen & {"pending", "running"}, f"the page never showed a live state: {seen}"
    expect(page.locator("td.progress")).to_have_text(["2 of 2 epochs"] * 4, timeout=30_000)
    assert page.evaluate("window.__sameDocument") is True
    expect(page.locator("#live-status")).to_have_text("Every run shown has ended.")
    screenshot(page, "runs-done")
    assert accessibility_violations(page) == [], "the runs of an experiment"

    # Runs that arrive later (two imported logs) are announced on the unfiltered list, and shown on request.
    page.goto(f"{server}/runs")
    expect(rows).to_have_count(4)
    logs = [{"name": f"run_{gpus}gpu.out", "content": course_log(gpus)} for gpus in (1, 2)]
    assert httpx.post(f"{server}/api/imports", json={"name": "later", "files": logs}, timeout=10).status_code == 201
    expect(page.locator("#new-runs")).to_have_text("2 new runs: show them", timeout=10_000)
    page.click("#new-runs")
    expect(rows).to_have_count(6)
    expect(page.locator("#new-runs")).to_be_hidden()
    page.goto(f"{server}/runs?experiment={experiment_id}")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "runs-phone")
    page.set_viewport_size({"width": 1280, "height": 900})

    # One run: its state, output and curves.
    first = rows.first.get_attribute("data-run")
    page.click(f"a[href='/runs/{first}']")
    expect(page.locator("#run-state")).to_have_text("completed")
    expect(page.locator("#log")).to_contain_text('[METRIC] {"v":1,"kind":"end"')
    page.wait_for_function("document.getElementById('chart-run-loss').data?.[0]?.x.length === 2")
    assert chart_traces(page, "run-loss")["train loss"]["x"] == [1, 2]
    screenshot(page, "run")
    assert accessibility_violations(page) == [], "a run that ran on Slurm"

    # The experiment's dashboard: every chart with one trace per strategy and a point per GPU count.
    page.goto(f"{server}/experiments/{experiment_id}")
    charts_final(page)
    per_strategy = {"ddp": [1, 2], "fsdp": [1, 2]}
    ideal = {"ddp: ideal": [1, 2], "fsdp: ideal": [1, 2]}
    expected = {
        "epoch-time": per_strategy | ideal,
        "speedup": per_strategy | ideal,
        "efficiency": per_strategy | {"ideal": [1, 2]},
        "val-loss": per_strategy,
        "val-accuracy": per_strategy,
        "memory": per_strategy,
    }
    # The step model's curve is drawn where it can be: from each 1-process run, and at 2 processes only with a fabric
    # fit, which this server has none of (no probe ran). Its own browser test is test_charts_in_browser's.
    modelled_ddp = {"ddp: step model": [1]}
    modelled = {**modelled_ddp, "fsdp: step model": [1]}
    for chart, traces in expected.items():
        got = {name: trace["x"] for name, trace in chart_traces(page, chart).items()}
        assert {name: x for name, x in got.items() if not name.endswith(": step model")} == traces, chart
    drawn = {name: trace["x"] for name, trace in chart_traces(page, "epoch-time").items()}
    assert {name: x for name, x in drawn.items() if name in modelled} == modelled
    speedup = chart_traces(page, "speedup")
    assert speedup["ddp"]["y"][0] == speedup["fsdp"]["y"][0] == 1
    assert all(y > 0 for y in chart_traces(page, "epoch-time")["ddp"]["y"])
    curves = chart_traces(page, "loss-curves")
    assert len(curves) == 8 and all(trace["x"] == [1, 2] for trace in curves.values())
    expect(page.locator("#compare-table tbody tr")).to_have_count(4)
    expect(page.locator("#state-counts")).to_have_text("4 completed")  # the heading follows the runs too
    screenshot(page, "dashboard")
    assert accessibility_violations(page) == [], "the experiment of runs that ran on Slurm"

    # The CSV download: one row per run, with the figures.
    with page.expect_download() as download:
        page.click("#export-csv")
    rows_csv = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    run_ids = set(page.eval_on_selector_all("#compare-table tbody th a", "links => links.map(a => a.textContent)"))
    assert {row["run_id"] for row in rows_csv} == run_ids and len(rows_csv) == 4
    assert sorted((row["strategy"], row["gpus"]) for row in rows_csv) == [
        ("ddp", "1"),
        ("ddp", "2"),
        ("fsdp", "1"),
        ("fsdp", "2"),
    ]
    assert all(row["state"] == "completed" and float(row["mean_epoch_time_s"]) > 0 for row in rows_csv)

    # A chart as an image.
    with page.expect_download() as image:
        page.get_by_role("button", name="Download “Time per epoch against GPUs” as SVG").click()
    assert image.value.suggested_filename == f"scalelab-{experiment_id}-epoch-time.svg"
    assert "<svg" in Path(image.value.path()).read_text()[:500]

    # Any selection of runs: the two DDP runs, chosen on the runs page.
    page.goto(f"{server}/runs?experiment={experiment_id}&strategy=ddp")
    expect(rows).to_have_count(2)
    for box in page.locator("tr[data-run] input[type='checkbox']").all():
        box.check()
    page.click("text=Compare selected runs")
    charts_final(page)
    got = chart_traces(page, "epoch-time")
    assert {name: trace["x"] for name, trace in got.items()} == {"ddp": [1, 2], "ddp: ideal": [1, 2], **modelled_ddp}
    with page.expect_download() as download:
        page.click("#export-csv")
    selected = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert sorted(row["gpus"] for row in selected) == ["1", "2"]
    assert [float(row["speedup"]) for row in selected if row["gpus"] == "1"] == [1.0]
    screenshot(page, "compare-selection")
