"""A runs directory on a file system that fills up: a 507 that says what to do, and nothing half-written.

The runs directory is a real tmpfs of 64 KiB mounted for each test: a sweep's run directories fill it partway.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_client
from tests.factories import experiment_request
from tests.server.api.test_experiments import counts
from tests.server.api.test_imports import files, worker_log


@pytest.fixture
def full_client(settings, local_scheduler) -> Iterator:
    runs_dir: Path = settings.runs_dir
    runs_dir.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "scalelab-test-runs", str(runs_dir)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        with make_client(settings, local_scheduler) as client:
            yield client
    finally:
        subprocess.run(["umount", "-l", str(runs_dir)], check=True)


def left_in(runs_dir: Path) -> list[str]:
    return sorted(os.listdir(runs_dir))


def test_a_sweep_that_fills_the_runs_directory_is_a_507_and_keeps_nothing(full_client, settings):
    # 40 runs of two files each: the first few fit, then the file system is full.
    request = experiment_request(grid={"seed": list(range(40))})
    response = full_client.post("/api/experiments", json=request)
    assert response.status_code == 507, response.text
    detail = response.json()["detail"]
    assert "No space left on device" in detail
    assert "nothing was submitted" in detail
    assert "check the runs directory's space" in detail
    assert counts(full_client) == (0, 0)
    assert left_in(settings.runs_dir) == []  # the directories written before the file system filled are gone too

    # Once there is room (this one run fits), submitting works again: nothing of the failed sweep is in the way.
    again = full_client.post("/api/experiments", json=experiment_request(grid={"seed": [1]}, base={"epochs": 1}))
    assert again.status_code == 201, again.text
    run = again.json()["runs"][0]
    assert full_client.post(f"/api/runs/{run['id']}/cancel").status_code == 202
    assert counts(full_client) == (1, 1)


def test_an_import_larger_than_the_free_space_is_a_507_and_keeps_nothing(full_client, settings):
    log = worker_log(2) + "progress line that makes the log large\n" * 3000  # about 120 KB
    response = full_client.post("/api/imports", json={"name": "big", "files": files(("big.out", log))})
    assert response.status_code == 507, response.text
    assert "No space left on device" in response.json()["detail"]
    assert "nothing was imported" in response.json()["detail"]
    assert counts(full_client) == (0, 0)
    assert left_in(settings.runs_dir) == []
