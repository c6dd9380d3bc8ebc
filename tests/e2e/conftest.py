"""Fixtures the end-to-end suites share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from benches.server_process import running_server

PROFILES = Path(__file__).resolve().parent / "profiles"


@contextmanager
def slurm2_server_in(folder: Path, slurm2_env: dict[str, str], **env: str) -> Iterator[str]:
    """A real server whose sbatch, squeue and sacct (and so its jobs) talk to the two-node cluster."""
    profile = {"SCALELAB_PROFILES_DIR": str(PROFILES), "SCALELAB_PROFILE": "twonode"}
    with running_server(folder, "slurm", env={**slurm2_env, **profile, **env}) as url:
        yield url


@pytest.fixture
def slurm2_server(slurm2_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    with slurm2_server_in(tmp_path, slurm2_env) as url:
        yield url
