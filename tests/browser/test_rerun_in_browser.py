"""The run page of a run made in the worker image shows its digest, and "Run again on this image" starts a new
run pinned to it, whose page the browser goes to."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from benches.server_process import running_server
from tests.browser.conftest import screenshot
from tests.conftest import WORKER_IMAGE
from tests.e2e.runs import wait_until_ended
from tests.factories import ROOT, experiment_request

pytestmark = [pytest.mark.slurm, pytest.mark.browser, pytest.mark.container]


@pytest.fixture
def podman_server(slurm: None, worker_image: str, tmp_path: Path) -> Iterator[str]:
    with running_server(tmp_path, "slurm", {"SCALELAB_PROFILES_DIR": str(ROOT / "examples" / "profiles")}) as url:
        yield url


def test_run_again_from_the_run_page(page: Page, podman_server: str, worker_image: str, tmp_path: Path):
    request = experiment_request(
        name="again in the browser",
        base={"model": "mlp", "dataset": "synthetic", "epochs": 1, "global_batch_size": 64, "lr": 0.05, "seed": 0},
        grid={"strategy": ["ddp"], "gpus": [1]},
        resources={"profile": "podman", "nodes": 1, "time_limit": "00:10:00"},
    )
    created = httpx.post(f"{podman_server}/api/experiments", json=request, timeout=60)
    assert created.status_code == 201, created.text
    (run,) = created.json()["runs"]
    log = tmp_path / "server.log"
    assert wait_until_ended(podman_server, run["id"], log)["state"] == "completed"

    page.goto(f"{podman_server}/runs/{run['id']}")
    expect(page.locator("#run-image-digest")).to_have_text(worker_image)
    expect(page.locator("#run-image")).to_contain_text(WORKER_IMAGE)
    expect(page.locator("#run-software")).to_contain_text("scalelab worker")
    screenshot(page, "run-provenance")
    page.click("button[data-action='rerun']")
    page.wait_for_url(lambda url: not url.endswith(f"/runs/{run['id']}"))
    again_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("#run-rerun-of")).to_contain_text(f"run {run['id']}")

    again = wait_until_ended(podman_server, again_id, log)
    assert again["state"] == "completed"
    assert (again["image"], again["image_digest"]) == (f"localhost/scalelab-worker@{worker_image}", worker_image)
    page.reload()
    expect(page.locator("#run-image-digest")).to_have_text(worker_image)
    screenshot(page, "run-again")
