"""The New experiment form in a real browser: it shows the settings the chosen kind of run and strategies read,
keeps the others within reach, and sends what the user set whether it is shown or not."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slurm]

INFERENCE_ONLY = ["max_new_tokens", "temperature", "top_k"]
STRATEGY_ONLY = ["tp_degree", "fsdp_sharding", "pp_schedule", "microbatches"]


def setting(page: Page, name: str) -> Locator:
    return page.locator(f".field[data-field='{name}'][data-prefix='f']")


def test_the_form_shows_what_applies_and_keeps_the_rest_within_reach(page: Page, server: str):
    page.goto(f"{server}/experiments/new")
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 3 runs.")

    # Training with DDP: no inference setting, none of another strategy; what DDP training reads is there.
    for name in INFERENCE_ONLY + STRATEGY_ONLY:
        expect(setting(page, name)).to_be_hidden()
    expect(page.locator("fieldset.group", has=page.locator("legend", has_text="Inference"))).to_be_hidden()
    for name in ["strategy", "gpus", "epochs", "lr", "precision", "seed"]:
        expect(setting(page, name)).to_be_visible()
    expect(page.locator("#hidden-fields")).to_have_text(
        "8 settings that this experiment's kind and strategies do not read are hidden."
    )
    screenshot(page, "new-experiment-ddp-settings")

    # Each strategy swept brings what it reads.
    page.check("#s-strategy")
    page.check("input[name='g-strategy'][value='fsdp']")
    expect(setting(page, "fsdp_sharding")).to_be_visible()
    expect(setting(page, "microbatches")).to_be_hidden()
    page.check("input[name='g-strategy'][value='pp']")
    expect(setting(page, "microbatches")).to_be_visible()
    expect(setting(page, "pp_schedule")).to_be_visible()
    expect(setting(page, "tp_degree")).to_be_hidden()
    page.uncheck("input[name='g-strategy'][value='pp']")
    expect(setting(page, "microbatches")).to_be_hidden()

    # Inference brings its own settings.
    page.select_option("#f-kind", "inference")
    for name in INFERENCE_ONLY:
        expect(setting(page, name)).to_be_visible()
    page.select_option("#f-kind", "train")
    expect(setting(page, "top_k")).to_be_hidden()
    # A fabric probe reads where it runs and how long it may take, nothing of a model.
    page.select_option("#f-kind", "probe")
    expect(setting(page, "probe_seconds")).to_be_visible()
    expect(setting(page, "epochs")).to_be_hidden()
    page.select_option("#f-kind", "train")
    expect(setting(page, "probe_seconds")).to_be_hidden()

    # The rest on request; a value set there stays in view, and is sent, under strategies that do not read it.
    page.check("#show-all-fields")
    for name in INFERENCE_ONLY + STRATEGY_ONLY:
        expect(setting(page, name)).to_be_visible()
    expect(page.locator("#hidden-fields")).to_have_text("")
    page.fill("#f-microbatches", "8")
    page.fill("#f-top_k", "5")
    page.uncheck("#show-all-fields")
    expect(setting(page, "microbatches")).to_be_visible()
    expect(setting(page, "top_k")).to_be_visible()
    expect(setting(page, "pp_schedule")).to_be_hidden()
    screenshot(page, "new-experiment-set-settings")

    page.fill("#x-name", "what the user set")
    page.fill("#g-gpus", "1")
    page.fill("#f-epochs", "1")
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 2 runs.")
    page.click("#submit-button")
    page.wait_for_url("**/runs?experiment=*")
    experiment_id = page.url.rsplit("=", 1)[1]
    httpx.post(f"{server}/api/experiments/{experiment_id}/cancel", timeout=30)  # its figures are not the point
    request = httpx.get(f"{server}/api/experiments/{experiment_id}", timeout=10).json()["request"]
    assert request["base"]["microbatches"] == 8 and request["base"]["top_k"] == 5, request
    assert request["grid"]["strategy"] == ["ddp", "fsdp"], request


def test_a_program_shows_only_what_it_reads_even_with_every_setting_asked_for(page: Page, server: str):
    page.goto(f"{server}/experiments/new")
    page.select_option("#f-kind", "program")
    page.check("#show-all-fields")
    for name in ["kind", "strategy", "gpus", "seed"]:
        expect(setting(page, name)).to_be_visible()
    for name in ["epochs", "lr", "microbatches", "max_new_tokens"]:
        expect(setting(page, name)).to_be_hidden()
