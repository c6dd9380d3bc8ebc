"""The peak-memory chart in a real browser: it charts what each run held per device and says by which measure."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from contract.records import EndRecord, EpochRecord, StartRecord, WorkerRecord, format_record
from tests.browser.conftest import charts_final, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slurm]

MIB = 2**20


def log(strategy: str, gpus: int, **memory: Any) -> str:
    records: list[WorkerRecord] = [
        StartRecord(world_size=gpus, nodes=1, device="cpu", backend="gloo", strategy=strategy),
        EpochRecord(epoch=1, train_loss=1.0, val_loss=1.1, val_accuracy=0.5, epoch_time_s=2.0, **memory),
        EndRecord(status="completed", total_time_s=3.0),
    ]
    return "".join(format_record(record) + "\n" for record in records)


def imported(server: str, name: str, logs: dict[str, str]) -> str:
    files = [{"name": f"{key}.out", "content": content} for key, content in logs.items()]
    created = httpx.post(f"{server}/api/imports", json={"name": name, "files": files}, timeout=30)
    assert created.status_code == 201, created.text
    experiment_id: str = created.json()["id"]
    return experiment_id


def memory_chart(page: Page, server: str, experiment: str) -> dict[str, Any]:
    page.goto(f"{server}/experiments/{experiment}")
    charts_final(page)
    chart: dict[str, Any] = page.evaluate(
        """() => {
          const element = document.getElementById('chart-memory');
          const traces = element.data.map((t) => ({ name: t.name, x: [...t.x], y: [...t.y], text: [...t.text] }));
          return { title: element.layout.yaxis.title.text, traces };
        }"""
    )
    return chart


def test_a_cpu_study_charts_what_the_tensors_held_and_says_so(page: Page, server: str):
    tensors = {"memory_kind": "cpu_tensors", "peak_rss_bytes": 900 * MIB}
    experiment = imported(
        server,
        "memory",
        {
            "ddp1": log("ddp", 1, peak_memory_bytes=56 * MIB, **tensors),
            "ddp2": log("ddp", 2, peak_memory_bytes=56 * MIB, **tensors),
            "fsdp2": log("fsdp", 2, peak_memory_bytes=29 * MIB, **tensors),
        },
    )
    chart = memory_chart(page, server, experiment)
    assert chart["title"] == "CPU tensors per GPU (MiB)"
    traces = {trace["name"]: trace for trace in chart["traces"]}
    assert (traces["ddp"]["x"], traces["ddp"]["y"]) == ([1, 2], [56, 56])
    assert (traces["fsdp"]["x"], traces["fsdp"]["y"]) == ([2], [29])
    assert all("CPU tensors" in text for trace in traces.values() for text in trace["text"])
    expect(page.locator("#desc-memory")).to_contain_text("CPU tensors: the most the tensors held")
    page.locator("#chart-memory").scroll_into_view_if_needed()
    screenshot(page, "memory-chart")


def test_runs_measured_differently_are_marked_as_not_comparable(page: Page, server: str):
    experiment = imported(
        server,
        "mixed memory",
        {
            "tensors": log("ddp", 2, peak_memory_bytes=56 * MIB, memory_kind="cpu_tensors"),
            "rss": log("fsdp", 2, peak_memory_bytes=850 * MIB, memory_kind="cpu_max_rss"),
        },
    )
    chart = memory_chart(page, server, experiment)
    assert chart["title"] == "peak memory per GPU (MiB), by different measures"
    expect(page.locator("#desc-memory")).to_contain_text("The runs measured it differently")
    traces = {trace["name"]: trace for trace in chart["traces"]}
    assert "CPU max RSS" in traces["fsdp"]["text"][0]
