"""The Python API (scalelab) against a real server with sign-in on, on the real two-node Slurm: connect as the command
does, submit, wait with progress, the DataFrames of a finished study, cancel, and the errors a notebook meets."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import scalelab
from benches.server_process import free_port
from scalelab import frames
from tests.e2e.conftest import slurm2_server_in
from tests.factories import experiment_request

pytestmark = pytest.mark.slurm
pd = pytest.importorskip("pandas")

# Two runs of a few seconds each; the long one is cancelled.
TINY = experiment_request(name="tiny, from python", grid={"strategy": ["ddp"], "gpus": [1, 2]})
TINY["base"]["epochs"] = 2
LONG = experiment_request(name="long, to cancel", grid={"gpus": [1]})
LONG["base"]["epochs"] = 500


@dataclass(frozen=True)
class Study:
    url: str
    token: str
    waited: scalelab.Experiment
    shown: str  # what wait's progress printed
    cancelled: scalelab.Experiment


@pytest.fixture(scope="module")
def study(slurm2_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Study]:
    folder = tmp_path_factory.mktemp("python-api")
    with (
        pytest.MonkeyPatch.context() as patch,
        slurm2_server_in(folder, slurm2_env, SCALELAB_AUTH="true") as url,
    ):
        # No user's config file, and no connection settings from the environment.
        patch.setenv("XDG_CONFIG_HOME", str(folder / "config"))
        patch.delenv("SCALELAB_URL", raising=False)
        patch.delenv("SCALELAB_TOKEN", raising=False)
        token = re.findall(r"sl_[A-Za-z0-9_-]{40,}", (folder / "server.log").read_text())[0]
        with scalelab.connect(url, token) as lab:
            waited, long = lab.submit(TINY), lab.submit(LONG)
            cancelled = long.cancel().wait(progress=False, interval_s=1, timeout_s=300)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                waited.wait(interval_s=1, timeout_s=600)
            yield Study(url, token, waited, out.getvalue(), cancelled)


def test_a_study_waited_for_reads_as_typed_dataframes(study: Study):
    assert study.waited.states == {"completed": 2}
    # Not a terminal here: a plain line per change, the last one the end.
    assert study.shown.splitlines()[-1] == "2 of 2 runs ended, 4 of 4 epochs (2 completed)"

    runs = study.waited.runs()
    assert list(runs.columns) == list(frames.RUNS) and runs["gpus"].tolist() == [1, 2]
    assert runs["state"].dtype.name == "category" and set(runs["state"]) == {"completed"}
    assert runs["job_id"].dtype == "string" and runs["job_id"].notna().all()  # Slurm's
    assert str(runs["ended_at"].dtype) == "datetime64[ns, UTC]" and runs["ended_at"].notna().all()

    compare = study.waited.compare().sort_values("gpus")
    assert list(compare.columns) == list(frames.COMPARE)
    assert compare["epochs_done"].tolist() == [2, 2] and compare["epochs_done"].dtype == "int64"
    assert compare["mean_epoch_time_s"].dtype == "float64" and (compare["mean_epoch_time_s"] > 0).all()
    assert compare["speedup"].iloc[0] == pytest.approx(1.0) and compare["speedup"].notna().all()
    assert compare["peak_memory_bytes"].dtype == "Int64" and compare["ingest_done"].all()

    scaling = study.waited.scaling()
    assert list(scaling.columns) == list(frames.SCALING)
    assert scaling["gpus"].tolist() == [1, 2] and scaling["n"].tolist() == [1, 1]
    assert scaling["series"].nunique() == 1 and scaling["efficiency"].dtype == "float64"
    assert set(scaling.attrs["recommendations"]) == set(scaling["series"])


def test_a_cancelled_study_ends_cancelled(study: Study):
    assert study.cancelled.states == {"cancelled": 1}
    assert study.cancelled.runs()["state"].tolist() == ["cancelled"]


def test_connect_reads_the_environment_then_the_config_file(study: Study, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("SCALELAB_URL", study.url)
    monkeypatch.setenv("SCALELAB_TOKEN", study.token)
    assert scalelab.connect().url == study.url
    # The module's own functions use the last connection.
    assert scalelab.experiment(study.waited.id).name == "tiny, from python"
    assert {study.waited.id, study.cancelled.id} <= {found.id for found in scalelab.experiments()}

    monkeypatch.delenv("SCALELAB_URL")
    monkeypatch.delenv("SCALELAB_TOKEN")
    (tmp_path / "scalelab").mkdir()
    (tmp_path / "scalelab" / "config.toml").write_text(f'url = "{study.url}"\ntoken = "{study.token}"\n')
    assert scalelab.connect().experiment(study.waited.id).refresh().run_count == 2


def test_errors_are_the_commands_kinds(study: Study, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with pytest.raises(scalelab.ServerUnreachable, match="cannot reach the scalelab server"):
        scalelab.connect(f"http://127.0.0.1:{free_port()}", study.token)
    with pytest.raises(scalelab.TokenRejected, match="rejected the token") as refused:
        scalelab.connect(study.url, "sl_wrong")
    assert refused.value.status_code == 401
    with scalelab.connect(study.url, study.token) as lab:
        with pytest.raises(scalelab.NotFound):
            lab.experiment("0000000000")
        with pytest.raises(scalelab.Invalid, match="epochs") as invalid:
            lab.submit({**TINY, "base": {**TINY["base"], "epochs": 0}})
        assert ("body", "base", "epochs") in invalid.value.locations()
        with pytest.raises(scalelab.Conflict):
            study.cancelled.cancel()  # it has ended
    (tmp_path / "scalelab").mkdir()
    (tmp_path / "scalelab" / "config.toml").write_text('colour = "blue"\n')
    with pytest.raises(scalelab.UsageError, match="unknown keys colour"):
        scalelab.connect()
    assert all(issubclass(kind, scalelab.ClientError) for kind in (scalelab.Conflict, scalelab.Unavailable))
