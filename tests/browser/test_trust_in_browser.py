"""Scaling figures a researcher can trust, in a real browser: flagged points stand out and say why, points carry
their intervals, the fitted laws and the time per step by part are drawn, figures the cluster does not gather say
so, and the new-experiment form sends isolation, repeats and the scaling mode."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from server.models import CompareRow
from server.services.comparison.series import point_medians
from tests.browser.conftest import charts_final, screenshot
from tests.factories import course_log

pytestmark = [pytest.mark.browser, pytest.mark.slurm]

# Seconds per epoch of two repeats at each GPU count: 4 GPUs run 8 times as fast as 1, more than the GPUs can
# explain, so that point (and only it) is superlinear; the repeats differ a little, so each point has an interval
# narrow enough (n = 2 gives a wide one) not to reach its neighbours.
TIMES = {1: (40.0, 40.2), 2: (20.2, 20.3), 4: (5.0, 5.02), 8: (8.0, 8.04)}
EPOCHS = 6


# Plotly may hold arrays as typed arrays: made plain for JSON.
PLAIN_TRACES = (
    "id => JSON.parse(JSON.stringify(document.getElementById(id).data, (k, v) => ArrayBuffer.isView(v) ? [...v] : v))"
)


def chart(page: Page, chart_id: str) -> list[dict[str, Any]]:
    """The traces plotly holds on a chart's element, as JSON."""
    traces: list[dict[str, Any]] = page.evaluate(PLAIN_TRACES, f"chart-{chart_id}")
    return traces


def by_name(traces: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {trace["name"]: trace for trace in traces}


@pytest.fixture(scope="module")
def experiment(server: str) -> str:
    """One DDP series on 1 to 8 GPUs, two repeats each, read through the server's own import of course logs."""
    files = [
        # course_log prints epoch_time_s / gpus as each epoch's time.
        {"name": f"run_{gpus}gpu_{repeat}.out", "content": course_log(gpus, epochs=EPOCHS, epoch_time_s=seconds * gpus)}
        for gpus, times in TIMES.items()
        for repeat, seconds in enumerate(times)
    ]
    created = httpx.post(f"{server}/api/imports", json={"name": "trust", "files": files}, timeout=30)
    assert created.status_code == 201, created.text
    experiment_id: str = created.json()["id"]
    return experiment_id


def open_dashboard(page: Page, server: str, experiment: str) -> None:
    page.goto(f"{server}/experiments/{experiment}")
    charts_final(page)


def test_the_superlinear_point_is_flagged_and_marked_with_its_interval(page: Page, server: str, experiment: str):
    open_dashboard(page, server, experiment)

    # The list above the charts: the flag, its severity, its sentence in full, and the point it concerns.
    flag = page.locator("#flag-list li[data-code='superlinear']")
    expect(flag).to_have_count(1)
    expect(flag.locator(".severity")).to_have_text("warning")
    expect(flag.locator(".concerns")).to_contain_text("ddp at 4 GPUs")
    rows = httpx.get(f"{server}/api/compare?experiment_id={experiment}", timeout=10).json()["data"]
    message = next(f["message"] for row in rows for f in row["flags"] if f["code"] == "superlinear")
    expect(flag.locator(".message")).to_have_text(message)

    # In the charts, the flagged point is an open red symbol with the message in its hover text; the others are
    # plain. Every point has its error bar, since every point has two repeats.
    for chart_id, key in (("epoch-time", "ddp"), ("speedup", "ddp"), ("efficiency", "ddp")):
        series = by_name(chart(page, chart_id))[key]
        assert series["x"] == [1, 2, 4, 8], chart_id
        symbols = dict(zip(series["x"], series["marker"]["symbol"], strict=True))
        colours = dict(zip(series["x"], series["marker"]["color"], strict=True))
        assert symbols[4].endswith("-open") and colours[4] == "#B00020", (chart_id, symbols, colours)
        assert symbols[1] == "circle" and colours[1] != "#B00020", (chart_id, symbols, colours)
        assert message in series["text"][2] and "n = 2 runs" in series["text"][2]
    times = by_name(chart(page, "epoch-time"))["ddp"]
    assert len(times["error_y"]["array"]) == 4 and all(plus > 0 for plus in times["error_y"]["array"]), times["error_y"]
    assert "error_y" in by_name(chart(page, "speedup"))["ddp"]

    # The server's fitted laws, a curve for each it predicted that describes the points, and its recommendation
    # below the chart.
    (analysis,) = httpx.get(f"{server}/api/scaling?experiment_id={experiment}", timeout=10).json()["series"]
    drawn = [p["law"] for p in analysis["predicted"] if analysis["fits"][p["law"]]["describes_points"]]
    laws = {f"ddp: {'Amdahl' if law == 'amdahl' else 'USL'} fit" for law in drawn}
    assert {name for name in by_name(chart(page, "speedup")) if name.endswith(" fit")} == laws
    expect(page.locator("#fit-notes .recommendation")).to_have_text(analysis["recommendation"])

    # The table: each point's mean ± interval and n, and a marker on the flagged rows whose title is the message.
    flagged = page.locator("#compare-table tbody tr.warning")
    expect(flagged).to_have_count(2)
    expect(flagged.first.locator(".flag-marker")).to_have_attribute("title", f"warning: {message}")
    expect(page.locator("#compare-table tbody td.point").first).to_contain_text("±")
    screenshot(page, "dashboard-trust")


def _augmented_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The server's rows with what the worker's timing and Slurm's accounting add: a time breakdown per step, a
    straggler in one run at 2 GPUs, GPU-hours per epoch, and no energy (this cluster gathers none)."""
    straggler = next(row for row in rows if row["gpus"] == 2)
    for row in rows:
        row["time_breakdown"] = {
            "data": 0.01,
            "compute": 0.2 / row["gpus"],
            "optimizer": 0.02,
            "comm": 0.01 * row["gpus"],
        }
        row["resources"] = {
            "elapsed_s": 300.0, "cpu_efficiency": 0.8, "max_rss_bytes": 2**30, "gpu_utilization": None,
            "energy_j": None, "device_hours_per_epoch": 0.01 * row["gpus"], "device_kind": "gpu",
            "energy_per_sample_j": None, "shared_with": [], "not_gathered": ["energy_j", "gpu_utilization"],
        }  # fmt: skip
        if row is straggler:
            row["flags"] = [
                *row["flags"],
                {"code": "straggler", "severity": "warning", "message": "one rank is slow"},
                {"code": "oversubscribed", "severity": "warning", "message": "2 processes shared 1 core"},
            ]
            row["resources"]["shared_with"] = ["4242"]
            row["step_time_fastest_s"], row["step_time_slowest_s"] = 0.1, 0.3
    return rows


# The server's sentence of the fits below, as scaling_laws.summary writes it.
FITS = (
    "Amdahl: serial fraction 0.05 (r² 0.97). USL: contention \N{GREEK SMALL LETTER SIGMA} 0.04, coherency "
    "\N{GREEK SMALL LETTER KAPPA} 0.002 (r² 0.98), past 21 GPUs adding GPUs makes it slower."
)


def _scaling(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A scaling analysis of the rows, with both laws fitted to 4 times the largest GPU count, and each point's runs
    with the server's medians over them of the figures the rows add."""
    points = {}
    for row in rows:
        runs = [other for other in rows if other["gpus"] == row["gpus"]]
        medians = point_medians([CompareRow.model_validate(run) for run in runs])
        points[row["gpus"]] = {
            "gpus": row["gpus"], "mean": row["point_mean_s"] or row["mean_epoch_time_s"],
            "ci_low": row["point_ci_low_s"], "ci_high": row["point_ci_high_s"], "n": row["point_n"] or 1,
            "speedup": row["speedup"],
            "speedup_ci_low": row["speedup_ci_low"], "speedup_ci_high": row["speedup_ci_high"],
            "efficiency": row["efficiency"], "flags": [],
            "run_ids": [run["run_id"] for run in runs], "medians": medians.model_dump(mode="json"),
        }  # fmt: skip
    predicted = [
        {"gpus": gpus, "law": law, "speedup": gpus / (1 + share * (gpus - 1))}
        for law, share in (("amdahl", 0.05), ("usl", 0.08))
        for gpus in (1, 2, 4, 8, 16, 32)
    ]
    series = {
        "series": "ddp", "strategy": "ddp", "scaling": "strong", "measure": "epoch_time_s", "baseline_gpus": 1,
        "points": sorted(points.values(), key=lambda point: point["gpus"]),
        "fits": {"amdahl": {"serial_fraction": 0.05, "r2": 0.97, "describes_points": True},
                 "usl": {"sigma": 0.04, "kappa": 0.002, "r2": 0.98, "peak_gpus": 21.0, "describes_points": True},
                 "refused": None, "r2_bound": 0.9,
                 "summary": FITS},
        "predicted": predicted,
        "recommendation": "Use 8 GPUs: beyond, each GPU added gains less than half of one.",
        "advice": "given", "batch": "every run trains the same global batch of 64",
    }  # fmt: skip
    return {"experiment_id": None, "series": [series], "flags": []}


def test_fits_breakdown_and_resources(page: Page, server: str, experiment: str):
    def compare(route: Route) -> None:
        response = route.fetch()
        body = response.json()
        route.fulfill(response=response, json=body | {"data": _augmented_rows(body["data"])})

    def scaling(route: Route) -> None:
        rows = httpx.get(f"{server}/api/compare?experiment_id={experiment}", timeout=10).json()["data"]
        route.fulfill(status=200, content_type="application/json", body=json.dumps(_scaling(_augmented_rows(rows))))

    page.route("**/api/compare?*", compare)
    page.route("**/api/scaling?*", scaling)
    open_dashboard(page, server, experiment)

    # The speed-up chart: the points, the ideal and both fitted laws to 32 GPUs; below, the recommendation and the
    # laws' parameters; its caption names the scaling mode.
    speedup = by_name(chart(page, "speedup"))
    assert {"ddp", "ddp: ideal", "ddp: Amdahl fit", "ddp: USL fit"} <= set(speedup)
    assert speedup["ddp: Amdahl fit"]["x"] == [1, 2, 4, 8, 16, 32]
    assert speedup["ddp: USL fit"]["line"]["dash"] != "solid"
    notes = page.locator("#fit-notes .fit[data-series='ddp']")
    expect(notes.locator(".recommendation")).to_have_text(
        "Use 8 GPUs: beyond, each GPU added gains less than half of one."
    )
    expect(notes.locator(".fit-parameters")).to_contain_text("serial fraction 0.05")
    expect(notes.locator(".fit-parameters")).to_contain_text("κ 0.002")
    expect(page.locator("#mode-speedup")).to_have_text(" (strong scaling)")

    # The time per step: one stacked trace per part, the straggler's point outlined red and named below.
    breakdown = chart(page, "breakdown")
    assert [trace["name"] for trace in breakdown] == ["data loading", "compute", "optimizer", "communication"]
    assert all(trace["type"] == "bar" for trace in breakdown)
    compute = breakdown[1]
    assert compute["x"][1] == ["1 GPUs", "2 GPUs", "4 GPUs", "8 GPUs"] or compute["x"][1][0] == "1 GPU"
    assert compute["marker"]["line"]["width"] == [0, 3, 0, 0]
    layout_mode = page.evaluate("document.getElementById('chart-breakdown').layout.barmode")
    assert layout_mode == "stack"
    expect(page.locator("#straggler-notes")).to_contain_text("one rank is slow")

    # Resources: GPU-hours per epoch drawn; energy not gathered on this cluster, said instead of zeros.
    hours = by_name(chart(page, "device-hours"))["ddp"]
    assert hours["x"] == [1, 2, 4, 8] and hours["y"] == pytest.approx([0.01, 0.02, 0.04, 0.08])
    assert chart(page, "energy") == []
    annotations = page.evaluate("document.getElementById('chart-energy').layout.annotations.map(a => a.text)")
    assert annotations == ["not gathered on this cluster"]
    screenshot(page, "dashboard-fits-breakdown")

    # A run's page: its flags and what accounting says it used.
    run_id = page.locator("#straggler-notes li").inner_text().split("run ")[1].split(":")[0]
    page.goto(f"{server}/runs/{run_id}")
    expect(page.locator("#run-flags li[data-code='straggler'] .message")).to_have_text("one rank is slow")
    expect(page.locator("#run-hardware")).to_have_text(
        "2 processes shared 1 core Its nodes ran other jobs during it: 4242."
    )
    expect(page.locator("#run-resources dd[data-figure='energy_j']")).to_have_text("not gathered on this cluster")
    expect(page.locator("#run-resources dd[data-figure='cpu_efficiency']")).to_have_text("80 %")
    expect(page.locator("#run-resources dd[data-figure='max_rss_bytes']")).to_have_text("1 GiB")
    screenshot(page, "run-trust")


def test_the_form_sends_isolation_repeats_and_scaling(page: Page, server: str):
    posted: list[dict[str, Any]] = []

    # The server's answer to a request it refuses, naming the field; nothing is submitted to Slurm.
    def refuse(route: Route) -> None:
        if route.request.method != "POST":
            route.fallback()
            return
        posted.append(json.loads(route.request.post_data or "{}"))
        detail = [{"loc": ["body", "repeats"], "msg": "Input should be less than or equal to 20", "type": "x"}]
        route.fulfill(status=422, content_type="application/json", body=json.dumps({"detail": detail}))

    page.goto(f"{server}/experiments/new")
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 3 runs.")
    expect(page.locator("#h-x-isolation")).to_contain_text("exclusive: each run has its nodes to itself")

    # Caught in the page: repeats out of bounds.
    page.fill("#x-name", "trust form")
    page.fill("#x-repeats", "25")
    page.click("#submit-button")
    expect(page.locator("#e-x-repeats")).to_have_text("must be from 1 to 20, not 25")
    expect(page.locator("#x-repeats")).to_have_attribute("aria-invalid", "true")

    # Sent as asked; the server's 422 on a field shows at that field.
    page.route("**/api/experiments", refuse)
    page.fill("#x-repeats", "3")
    page.select_option("#x-isolation", "shared")
    page.select_option("#x-scaling", "weak")
    page.click("#submit-button")
    expect(page.locator("#e-x-repeats")).to_have_text("Input should be less than or equal to 20")
    assert posted and {key: posted[-1][key] for key in ("isolation", "repeats", "scaling")} == {
        "isolation": "shared",
        "repeats": 3,
        "scaling": "weak",
    }
    screenshot(page, "new-experiment-trust")
