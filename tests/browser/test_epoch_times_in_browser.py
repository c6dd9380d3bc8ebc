"""The time of each epoch, one line per run, on the dashboard and on a run's page: a run slowed for a while shows at a
glance, where the medians of the other charts hide it."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from contract.records import EpochRecord, StartRecord, WorkerRecord, format_record
from tests.browser.conftest import ARTIFACTS, charts_final, screenshot
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
    charts_final(page)
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


def worker_log(gpus: int, compute_s: float) -> str:
    """The worker's own records, as a run made elsewhere printed them: two epochs with a time breakdown."""
    parts = {"data": 0.001, "compute": compute_s, "optimizer": 0.001, "comm": 0.0 if gpus == 1 else 0.002}
    records: list[WorkerRecord] = [
        StartRecord(world_size=gpus, nodes=1, device="cpu", backend="gloo", strategy="ddp", torch_version="2")
    ]
    records += [
        EpochRecord(epoch=n, train_loss=1.0, epoch_time_s=1.0, step_time_s=sum(parts.values()), time_breakdown=parts)
        for n in (1, 2)
    ]
    return "".join(format_record(record) + "\n" for record in records)


def test_the_dashboard_draws_the_step_model_beside_the_measured_points(page: Page, server: str):
    """The 1-process run predicts itself; without a fabric fit (none is stored on this server) the larger points
    are not predicted, and the notes say why rather than draw a guess."""
    logs = {f"ddp_{gpus}gpu.out": worker_log(gpus, 0.04 / gpus) for gpus in (1, 2, 4)}
    experiment = imported(server, "a step model without a fabric fit", logs)
    page.goto(f"{server}/experiments/{experiment}")
    charts_final(page)
    models = [line for line in drawn(page, "chart-speedup") if line["name"].endswith(": step model")]
    assert [(line["x"], line["y"]) for line in models] == [([1], [1])], drawn(page, "chart-speedup")
    note = page.locator("#fit-notes p.model")
    expect(note).to_contain_text("compute from run")
    expect(note).to_contain_text("2 GPUs: no intra-node fabric fit for 1 node(s) x 2 process(es)")
    screenshot(page, "dashboard-step-model")
