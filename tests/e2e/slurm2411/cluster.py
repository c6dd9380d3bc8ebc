"""Where the Slurm 24.11 cluster in containers is, for its tests (scripts/slurm-containers, issue 20).

The settings are the script's own environment variables, so a test talks to the instance the script brings up.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "slurm-containers"
IMAGE = os.environ.get("SCALELAB_SLURM2411_IMAGE", "localhost/scalelab-slurm2411:latest")
STATE_DIR = Path(os.environ.get("SCALELAB_SLURM2411_STATE_DIR", "/var/lib/scalelab-slurm2411"))
SHARED = Path(os.environ.get("SCALELAB_SLURM2411_SHARED", str(STATE_DIR / "shared")).split(":")[0])
SIF = Path(os.environ.get("SCALELAB_SIF_DIR", str(SHARED / "images"))) / "scalelab-worker.sif"
CLUSTER = os.environ.get("SCALELAB_SLURM2411_CLUSTER", "scalelab2411")
CONTAINERS = tuple(f"{CLUSTER}-{host}" for host in ("s24ctl", "s24n1", "s24n2"))
REQUIRED = os.environ.get("SCALELAB_REQUIRE_SLURM2411") == "1"


def missing(message: str) -> None:
    """Skip, or fail where the cluster is required (CI)."""
    if REQUIRED:
        pytest.fail(message)
    pytest.skip(message)


def in_container(container: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", container, *argv], capture_output=True, text=True, timeout=60, check=False)
