"""The failure summary in a real browser: an experiment whose program cannot import, on the real local Slurm, shows
its failures by kind and grid coordinate with the kind's sentence on its page, and each run's page its kind and
evidence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from contract.states import FailureKind
from server.services.failure_kinds import ADVICE
from tests.browser.conftest import screenshot
from tests.conftest import serving
from tests.e2e.runs import wait_until_ended
from tests.e2e.test_lifecycle import submit

pytestmark = [pytest.mark.browser, pytest.mark.slurm]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("failures-browser")
    (folder / "project").mkdir()
    (folder / "project" / "broken.py").write_text("import no_such_module\n")
    return folder


@pytest.fixture(scope="module")
def server(slurm: None, work: Path) -> Iterator[str]:
    with serving(work, {"SCALELAB_POLL_INTERVAL_S": "1", "SCALELAB_PROGRAM_ROOTS": str(work / "project")}) as url:
        yield url


def test_the_experiment_page_summarises_its_failures(page: Page, server: str, work: Path):
    request = {
        "name": "cannot import",
        "base": {"kind": "program", "strategy": "ddp", "gpus": 1,
                 "program": {"command": ["python", "broken.py"], "workdir": str(work / "project")}},
        "grid": {"gpus": [1, 2]},
        "isolation": "shared",
        "on_failure": "continue",
        "on_hang": "keep",
        "resources": {"nodes": 1, "time_limit": "00:10:00"},
    }  # fmt: skip
    experiment = submit(server, request)
    runs = [wait_until_ended(server, run["id"], work / "server.log") for run in experiment["runs"]]
    assert [run["failure_kind"] for run in runs] == ["import_error", "import_error"]

    page.goto(f"{server}/experiments/{experiment['id']}")
    failures = page.locator("#failures")
    expect(failures).to_be_visible()
    expect(page.locator("#failure-count")).to_have_text("2 of 2 runs failed.")
    kind = failures.locator('li[data-kind="import_error"]')
    expect(kind).to_contain_text("2 of 2 import error: 1 GPU; 2 GPUs.")
    expect(kind).to_contain_text(ADVICE[FailureKind.import_error])
    screenshot(page, "experiment-failures")

    kind.get_by_role("link", name=runs[1]["id"]).click()
    expect(page.locator("#run-failure")).to_contain_text("import error")
    expect(page.locator("#run-failure")).to_contain_text("No module named 'no_such_module'")
    screenshot(page, "run-failure")

    # A new experiment from this one keeps its on_failure and on_hang in the form.
    page.goto(f"{server}/experiments/new?from={experiment['id']}")
    expect(page.locator("#x-on_failure")).to_have_value("continue")
    expect(page.locator("#x-on_hang")).to_have_value("keep")
    page.goto(f"{server}/experiments/new")
    expect(page.locator("#x-on_failure")).to_have_value("stop_series")
    expect(page.locator("#x-on_hang")).to_have_value("cancel")
