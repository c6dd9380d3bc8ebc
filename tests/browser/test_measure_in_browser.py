"""The measure caption in a real browser: a series of runs that printed no epoch is measured by run time and the
dashboard says so (caption, time axis, run-time column); one that timed its epochs says epoch time."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from contract.records import EpochRecord, LaunchRecord, StartRecord, WorkerRecord, format_record
from tests.browser.conftest import charts_final, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slurm]

T0 = 1_764_000_000.0


def log(gpus: int, run_s: float, epochs: int) -> str:
    """A run's output as its batch script and its program print it: its launch timed around what it printed."""
    records: list[WorkerRecord] = [
        StartRecord(world_size=gpus, nodes=1, strategy="ddp"),
        LaunchRecord(event="start", at=T0),
        *(EpochRecord(epoch=n, train_loss=1.0 / n, epoch_time_s=run_s / (epochs + 1)) for n in range(1, epochs + 1)),
        LaunchRecord(event="end", at=T0 + run_s, exit_status=0),
    ]
    return "".join(format_record(record) + "\n" for record in records)


def imported(server: str, name: str, epochs: int) -> str:
    files = [{"name": f"run_{gpus}.out", "content": log(gpus, 12.0 / gpus, epochs)} for gpus in (1, 2)]
    created = httpx.post(f"{server}/api/imports", json={"name": name, "files": files}, timeout=30)
    assert created.status_code == 201, created.text
    experiment_id: str = created.json()["id"]
    return experiment_id


def open_dashboard(page: Page, server: str, experiment: str) -> None:
    page.goto(f"{server}/experiments/{experiment}")
    charts_final(page)


def test_the_dashboard_says_which_time_each_study_is_measured_by(page: Page, server: str):
    silent = imported(server, "prints nothing", epochs=0)
    open_dashboard(page, server, silent)
    caption = page.locator("#scaling-measure")
    expect(caption).to_have_attribute("data-measure", "run_time_s")
    expect(caption).to_contain_text("Measured by run time")
    expect(page.locator("#compare-table tbody td.run-time")).to_have_text(["12", "6"])
    title = page.evaluate("() => document.getElementById('chart-epoch-time').layout.yaxis.title.text")
    assert title == "seconds per run (start-up included)"
    screenshot(page, "measure-run-time")

    timed = imported(server, "prints epochs", epochs=3)
    open_dashboard(page, server, timed)
    expect(caption).to_have_attribute("data-measure", "epoch_time_s")
    expect(caption).to_contain_text("Measured by epoch time")
