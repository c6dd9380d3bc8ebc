"""Every page of the site checked with axe-core (Deque's accessibility engine) in a real browser, once its scripts
have drawn what they draw: charts, tables, the form in each of its states."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import accessibility_violations, charts_final
from tests.factories import course_log

pytestmark = [pytest.mark.browser, pytest.mark.slurm]


@pytest.fixture(scope="module")
def imported(server: str) -> dict[str, str]:
    """An experiment of two runs read from course logs: pages with figures, without waiting for Slurm."""
    logs = [{"name": f"run_{gpus}gpu.out", "content": course_log(gpus)} for gpus in (1, 2)]
    created = httpx.post(f"{server}/api/imports", json={"name": "accessible", "files": logs}, timeout=30)
    assert created.status_code == 201, created.text
    experiment = created.json()["id"]
    runs = httpx.get(f"{server}/api/runs", params={"experiment_id": experiment}, timeout=10).json()["data"]
    return {"experiment": experiment, "run": runs[0]["id"], "other": runs[1]["id"]}


def test_the_lists_and_the_error_page_have_no_violation(page: Page, server: str, imported: dict[str, str]):
    page.goto(f"{server}/")
    expect(page.locator("main")).to_contain_text("accessible")
    assert accessibility_violations(page) == [], "home"
    page.goto(f"{server}/runs")
    expect(page.locator("tr[data-run]")).to_have_count(2)
    assert accessibility_violations(page) == [], "runs"
    page.goto(f"{server}/runs/no-such-run")
    assert accessibility_violations(page) == [], "not found"


def test_the_form_has_no_violation_in_any_of_its_states(page: Page, server: str, imported: dict[str, str]):
    page.goto(f"{server}/experiments/new")
    expect(page.locator("#preview-status")).to_contain_text("This experiment creates")
    assert accessibility_violations(page) == [], "training"
    page.check("#show-all-fields")
    page.check("#s-strategy")
    page.fill("#f-epochs", "0")
    page.click("#submit-button")  # the error summary and the marked fields
    expect(page.locator("#error-summary")).to_be_visible()
    assert accessibility_violations(page) == [], "all fields, swept, with errors"
    page.select_option("#f-kind", "inference")
    expect(page.locator("#inference-inputs")).to_be_visible()
    assert accessibility_violations(page) == [], "inference"
    page.select_option("#f-kind", "program")
    expect(page.locator("#program-inputs")).to_be_visible()
    assert accessibility_violations(page) == [], "program"
    page.goto(f"{server}/experiments/new?from={imported['experiment']}")
    expect(page.locator("#preview-status")).to_contain_text("This experiment creates")
    assert accessibility_violations(page) == [], "from an experiment"


def test_the_run_and_comparison_pages_have_no_violation_once_drawn(page: Page, server: str, imported: dict[str, str]):
    page.goto(f"{server}/runs/{imported['run']}")
    page.wait_for_function("document.getElementById('chart-run-loss').data?.[0]?.x.length === 2")
    assert accessibility_violations(page) == [], "run"
    page.goto(f"{server}/experiments/{imported['experiment']}")
    charts_final(page)
    assert accessibility_violations(page) == [], "experiment"
    page.goto(f"{server}/compare?run={imported['run']}&run={imported['other']}")
    charts_final(page)
    assert accessibility_violations(page) == [], "compare"


def test_the_pages_have_no_violation_on_a_phone(page: Page, server: str, imported: dict[str, str]):
    """Narrow, the tables scroll sideways in their wrappers: a keyboard must reach and scroll them too."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server}/")
    assert accessibility_violations(page) == [], "home"
    page.goto(f"{server}/runs")
    expect(page.locator("tr[data-run]")).to_have_count(2)
    assert accessibility_violations(page) == [], "runs"
    page.goto(f"{server}/runs/{imported['run']}")
    page.wait_for_function("document.getElementById('chart-run-loss').data?.[0]?.x.length === 2")
    assert accessibility_violations(page) == [], "run"
    page.goto(f"{server}/experiments/{imported['experiment']}")
    charts_final(page)
    assert accessibility_violations(page) == [], "experiment"
    page.goto(f"{server}/experiments/new")
    expect(page.locator("#estimates-table tbody tr")).to_have_count(3)
    assert accessibility_violations(page) == [], "the form with its estimates"
