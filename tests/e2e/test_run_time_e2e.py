"""A program that prints nothing, on the real local Slurm: its batch script times each launch, so its runs get a run
time, a speed-up measured by it (`measure` run_time_s) and a no_metrics flag that says the run time stands in; a
program that fails still gets its launch's end, with its exit status."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benches.server_process import running_server
from tests.e2e.runs import output_of, wait_until_ended
from tests.e2e.test_lifecycle import metrics_of, submit

pytestmark = [pytest.mark.slurm]

# Standard library only, a second or two per process, and not a line of output.
SILENT = "import time\ntime.sleep(1.5)\n"
FAILING = "import sys\nsys.exit(3)\n"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("run-time-e2e")


@pytest.fixture(scope="module")
def project(work: Path) -> Path:
    folder = work / "project"
    folder.mkdir()
    (folder / "silent.py").write_text(SILENT)
    (folder / "failing.py").write_text(FAILING)
    return folder


@pytest.fixture(scope="module")
def server(slurm: None, work: Path, project: Path) -> Iterator[str]:
    env = {"SCALELAB_POLL_INTERVAL_S": "1", "SCALELAB_PROGRAM_ROOTS": str(project)}
    with running_server(work, "slurm", env) as url:
        yield url


def request(name: str, project: Path, script: str, gpus: list[int]) -> dict[str, Any]:
    return {
        "name": name,
        "base": {"kind": "program", "strategy": "ddp", "gpus": 1,
                 "program": {"command": ["python", script], "workdir": str(project)}},
        "grid": {"gpus": gpus},
        "resources": {"nodes": 1, "time_limit": "00:05:00"},
    }  # fmt: skip


@pytest.fixture(scope="module")
def experiments(server: str, project: Path) -> dict[str, dict[str, Any]]:
    """Both experiments submitted before either test waits: they run side by side."""
    return {
        "silent": submit(server, request("prints nothing", project, "silent.py", [1, 2])),
        "failing": submit(server, request("exits 3", project, "failing.py", [1])),
    }


def test_a_program_that_prints_nothing_gets_a_run_time_speedup(server, experiments, work):
    experiment = experiments["silent"]
    for run in experiment["runs"]:
        ended = wait_until_ended(server, run["id"], work / "server.log", timeout_s=300)
        assert ended["state"] == "completed", output_of(server, run["id"])
        launches = [record for record in metrics_of(server, run["id"]) if record["kind"] == "launch"]
        assert [(r["event"], r["attempt"], r.get("exit_status")) for r in launches] == [
            ("start", 0, None),
            ("end", 0, 0),
        ]
    compare = httpx.get(f"{server}/api/compare", params={"experiment_id": experiment["id"]}, timeout=10).json()
    rows = {row["gpus"]: row for row in compare["data"]}
    assert sorted(rows) == [1, 2]
    for row in rows.values():
        assert row["epochs_done"] == 0 and row["mean_epoch_time_s"] is None
        assert row["run_time_s"] > 0 and row["measure"] == "run_time_s", row
        flags = {flag["code"]: flag for flag in row["flags"]}
        assert flags["no_metrics"]["severity"] == "info" and "run time" in flags["no_metrics"]["message"]
    assert rows[1]["speedup"] == pytest.approx(1.0)
    assert rows[2]["speedup"] == pytest.approx(rows[1]["run_time_s"] / rows[2]["run_time_s"])
    scaling = httpx.get(f"{server}/api/experiments/{experiment['id']}/scaling", timeout=10).json()
    (series,) = scaling["series"]
    assert series["measure"] == "run_time_s" and [point["gpus"] for point in series["points"]] == [1, 2]
    assert series["points"][1]["speedup"] == pytest.approx(rows[2]["speedup"])
    assert "No timed runs" not in series["recommendation"]


def test_a_failing_program_s_launch_ends_with_its_status_and_its_series_says_why_it_has_no_point(
    server, experiments, work
):
    experiment = experiments["failing"]
    (run,) = experiment["runs"]
    ended = wait_until_ended(server, run["id"], work / "server.log", timeout_s=300)
    assert ended["state"] == "failed" and ended["exit_code"].startswith("3:"), ended
    launches = [record for record in metrics_of(server, run["id"]) if record["kind"] == "launch"]
    assert [(r["event"], r.get("exit_status")) for r in launches] == [("start", None), ("end", 3)]
    (row,) = httpx.get(f"{server}/api/compare", params={"experiment_id": experiment["id"]}, timeout=10).json()["data"]
    assert row["run_time_s"] > 0 and row["measure"] is None and row["speedup"] is None
    scaling = httpx.get(f"{server}/api/experiments/{experiment['id']}/scaling", timeout=10).json()
    (series,) = scaling["series"]
    assert series["points"] == [] and "No run of this series completed (failed)" in series["recommendation"]
