"""The experiment page's "Rerun the failed": a program's run failed (a kind set on it), the form offers its kind,
refuses a change that makes the run invalid naming the field, and reruns it with a change that makes it pass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import accessibility_violations, screenshot
from tests.conftest import serving
from tests.e2e.runs import wait_until_ended
from tests.e2e.test_rerun_failed_e2e import failed_experiment, fragile_project

pytestmark = [pytest.mark.slurm, pytest.mark.browser]


@pytest.fixture
def fragile_server(slurm: None, tmp_path: Path) -> Iterator[str]:
    with serving(fragile_project(tmp_path), {"SCALELAB_PROGRAM_ROOTS": str(tmp_path / "project")}) as url:
        yield url


def test_rerun_the_failed_from_the_experiment_page(page: Page, fragile_server: str, tmp_path: Path):
    log = tmp_path / "server.log"
    created, original, kind = failed_experiment(fragile_server, tmp_path, "fails on seed 0, in the browser")

    page.goto(f"{fragile_server}/experiments/{created['id']}")
    form = page.locator("#rerun-form")
    expect(form).to_contain_text(f"{kind} (1)")
    assert accessibility_violations(page) == []
    form.get_by_label(f"{kind} (1)").check()
    form.get_by_label("Change in each rerun").fill("seed=-1")
    form.get_by_role("button", name="Rerun").click()
    expect(page.locator("#rerun-status")).to_contain_text("greater than or equal to 0")
    runs_url = f"{fragile_server}/api/runs?experiment_id={created['id']}"
    assert httpx.get(runs_url, timeout=10).json()["count"] == 1

    form.get_by_label("Change in each rerun").fill("seed=1")
    form.get_by_role("button", name="Rerun").click()
    status = page.locator("#rerun-status")
    expect(status).to_contain_text("1 run submitted: ")
    expect(status).to_contain_text(f"(a rerun of {original['id']})")
    screenshot(page, "rerun-the-failed")
    rerun_id = status.inner_text().split(": ", 1)[1].split(" ", 1)[0]
    done = wait_until_ended(fragile_server, rerun_id, log)
    assert (done["state"], done["rerun_of"], done["spec"]["seed"]) == ("completed", original["id"], 1)
    # Nothing failed is left without a rerun: the page offers the form no more.
    page.reload()
    expect(page.locator("#rerun-form")).to_have_count(0)
