"""The command under test reads no real user's config and no connection settings from the environment; and the
servers and files the command's tests share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client.terminal import FALLBACK_COLUMNS
from server.scheduler.slurm import SlurmScheduler
from tests.client.helpers import UNEVEN
from tests.conftest import make_client
from tests.factories import ROOT, course_log, experiment_request
from tests.server.api.test_experiments import failing_sbatch, unreachable_sbatch


@pytest.fixture(autouse=True)
def clean_connection(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SCALELAB_URL", raising=False)
    monkeypatch.delenv("SCALELAB_TOKEN", raising=False)
    # The tables' width, as where no terminal answers: pytest-xdist's workers get COLUMNS=80 from it.
    monkeypatch.setenv("COLUMNS", str(FALLBACK_COLUMNS))


@pytest.fixture
def logdir(tmp_path):
    directory = tmp_path / "old-study"
    directory.mkdir()
    for gpus in (1, 2, 16):
        (directory / f"run_{gpus}gpus.out").write_text(course_log(gpus))
    (directory / ".hidden").write_text("editor swap file")
    return directory


@pytest.fixture
def uneven(tmp_path):
    path = tmp_path / "uneven.toml"
    path.write_text(UNEVEN)
    return path


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """The README's example as a file, its runs sharing the node so that all are submitted at once."""
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(experiment_request()))
    return path


@pytest.fixture
def refusing(settings):
    """The app on a Slurm whose sbatch refuses every job, as it does for an unknown account."""
    with make_client(settings, SlurmScheduler(run=failing_sbatch)) as client:
        yield client


@pytest.fixture
def unreachable(settings):
    """The app on a Slurm whose controller does not answer."""
    with make_client(settings, SlurmScheduler(run=unreachable_sbatch)) as client:
        yield client


@pytest.fixture
def profiles_client(settings, local_scheduler):
    with make_client(
        settings.model_copy(update={"profiles_dir": ROOT / "examples" / "profiles"}), local_scheduler
    ) as c:
        yield c
