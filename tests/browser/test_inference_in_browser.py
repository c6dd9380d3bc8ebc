"""An inference experiment in a real browser on the real local Slurm: made in the form from a trained gpt and an
uploaded prompts file, then its view: the figures against the TP degree, compile off and on, and the text; and one
run's page: its figures and generations."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from playwright.sync_api import FilePayload, Page, expect

from tests.browser.conftest import accessibility_violations, charts_final, screenshot
from tests.browser.test_pages_in_browser import chart_traces
from tests.factories import tiny_gpt_request

pytestmark = [pytest.mark.browser, pytest.mark.slurm, pytest.mark.torch]

PROMPTS = b"def main(\n\nclass Foo:\n"


def _trained(server: str) -> str:
    """A tiny gpt trained through the API: the checkpoint the form offers."""
    experiment = httpx.post(f"{server}/api/experiments", json=tiny_gpt_request(), timeout=60).json()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        (run,) = httpx.get(f"{server}/api/runs", params={"experiment_id": experiment["id"]}, timeout=10).json()["data"]
        if run["state"] in ("completed", "failed", "cancelled", "timeout"):
            break
        time.sleep(1)
    assert run["state"] == "completed", run
    return str(run["id"])


def test_inference_form_and_view(page: Page, server: str):
    trained = _trained(server)
    page.goto(f"{server}/experiments/new")
    expect(page.locator("#inference-inputs")).to_be_hidden()
    page.fill("#x-name", "generation layouts")
    page.select_option("#f-kind", "inference")
    expect(page.locator("#inference-inputs")).to_be_visible()
    page.select_option("#f-model", "gpt")
    page.select_option("#x-on_invalid", "skip")
    expect(page.locator("#i-checkpoint_run option")).to_have_count(1)
    assert page.locator("#i-checkpoint_run").input_value() == trained
    prompts: FilePayload = {"name": "prompts.txt", "mimeType": "text/plain", "buffer": PROMPTS}
    page.set_input_files("#i-prompts", files=[prompts])
    expect(page.locator("#i-prompts-status")).to_have_text("prompts.txt: 2 prompts.")
    page.check("#s-strategy")
    page.uncheck("input[name='g-strategy'][value='ddp']")  # the training default, checked when the sweep opens
    page.check("input[name='g-strategy'][value='single']")
    page.check("input[name='g-strategy'][value='tp']")
    page.fill("#g-gpus", "1, 2")
    page.check("#s-compile")
    page.check("input[name='g-compile'][value='false']")
    page.check("input[name='g-compile'][value='true']")
    page.fill("#f-max_new_tokens", "6")
    page.fill("#f-global_batch_size", "2")
    expect(page.locator("#preview-status")).to_contain_text("This experiment creates 4 runs.", timeout=20_000)
    expect(page.locator("#preview-script")).to_contain_text("-m worker infer --spec")
    screenshot(page, "new-inference-experiment")
    assert accessibility_violations(page) == [], "the form, filled for inference"

    page.click("#submit-button")
    page.wait_for_url("**/runs?experiment=*")
    experiment_id = page.url.rsplit("=", 1)[1]
    page.goto(f"{server}/experiments/{experiment_id}")
    # Compiling on a shared CPU is slow: the view follows the runs until all are done.
    charts_final(page, timeout_ms=1_500_000)
    layouts = {"compile off": [1, 2], "compile on": [1, 2]}
    assert {name: trace["x"] for name, trace in chart_traces(page, "tokens").items()} == layouts
    assert {name: trace["x"] for name, trace in chart_traces(page, "ttft").items()} == layouts
    latency = chart_traces(page, "latency")
    assert {name: trace["x"] for name, trace in latency.items()} == {
        "compile off, p50": [1, 2], "compile on, p50": [1, 2], "compile off, p95": [1, 2], "compile on, p95": [1, 2]
    }  # fmt: skip
    assert all(y > 0 for trace in latency.values() for y in trace["y"])
    memory = chart_traces(page, "memory")  # a point per process: one for single, two for tp=2
    assert {name: trace["x"] for name, trace in memory.items()} == {"compile off": [1, 2, 2], "compile on": [1, 2, 2]}
    expect(page.locator("#inference-table tbody tr")).to_have_count(4)
    expect(page.locator("#state-counts")).to_have_text("4 completed")

    # The generations side by side: the same greedy text in every layout, for each prompt chosen.
    expect(page.locator("#prompt-choice option")).to_have_text(["1: def main(", "2: class Foo:"])
    for index, prompt in (("1", "class Foo:"), ("0", "def main(")):
        page.select_option("#prompt-choice", index)
        expect(page.locator("#generations-table pre").first).to_contain_text(prompt)
        texts = page.eval_on_selector_all("#generations-table pre mark", "cells => cells.map(c => c.textContent)")
        assert len(texts) == 4 and len(set(texts)) == 1 and len(texts[0]) == 6, texts
    screenshot(page, "inference-dashboard")
    assert accessibility_violations(page) == [], "the inference view"

    # A run's own page: its figures and generations, not the training curves an inference run has none of.
    page.locator("#inference-table tbody th a").first.click()
    page.wait_for_url("**/runs/*")
    expect(page.locator("#inference-status")).to_have_text("Finished: 2 prompts generated.")
    expect(page.locator("#run-inference [data-figure='tokens_per_s']")).to_have_text(re.compile(r"^[0-9.e+]+$"))
    expect(page.locator("#generations-table tbody tr")).to_have_count(2)
    expect(page.locator("#chart-run-loss")).to_have_count(0)
    assert accessibility_violations(page) == [], "an inference run's page"
