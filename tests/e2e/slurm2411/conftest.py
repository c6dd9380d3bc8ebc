"""Fixtures of the 24.11 cluster's tests: the cluster up, a work directory it shares, a user of the host."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.slurm2411.cluster import IMAGE, SCRIPT, SHARED, SIF, missing

LOG = logging.getLogger(__name__)  # the timings: pytest -o log_cli=true --log-cli-level=INFO


@pytest.fixture(scope="module")
def cluster_path() -> str:
    """The cluster is up; the PATH whose Slurm commands are the 24.11 cluster's wrappers."""
    if os.geteuid() != 0 or shutil.which("podman") is None:
        missing("the 24.11 cluster needs root and Podman (containers/build tools)")
    if subprocess.run(["podman", "image", "exists", IMAGE], check=False).returncode != 0:
        missing(f"no image {IMAGE}: run containers/build slurm2411")
    if not SIF.is_file():
        missing(f"no SIF {SIF}: run containers/build worker worker-sif")
    started = time.monotonic()
    up = subprocess.run([str(SCRIPT), "up"], capture_output=True, text=True, timeout=300, check=False)
    assert up.returncode == 0, up.stderr
    LOG.info("slurm-containers up: %.1f s", time.monotonic() - started)
    return f"{up.stdout.strip()}{os.pathsep}{os.environ['PATH']}"


@pytest.fixture
def work() -> Iterator[Path]:
    """A directory of the test in the directory the cluster shares with the host (world-readable)."""
    path = SHARED / "tests" / uuid.uuid4().hex[:12]
    path.mkdir(parents=True)
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def host_user(cluster_path: str) -> Iterator[str]:
    """A user the host creates after the cluster is up (as a centre adds one to its LDAP), removed afterwards."""
    if shutil.which("useradd") is None:
        missing("needs useradd")
    name = f"s24u{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False)
