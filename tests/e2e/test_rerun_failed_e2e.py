"""Rerun the failed on the real local Slurm: a program's run fails, and its rerun with a change completes, in the
same experiment, linked to the original, which stays failed."""

from __future__ import annotations

import sqlite3
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benches.server_process import running_server
from contract.states import FailureKind
from tests.e2e.runs import wait_until_ended
from tests.e2e.test_lifecycle import submit
from tests.e2e.test_program_e2e import program_request

pytestmark = pytest.mark.slurm

# A program that fails on seed 0, as a study's script does when one of its settings cannot work; any other seed
# trains (one epoch line, standard library only).
FRAGILE = """
import os, sys
if os.environ["SCALELAB_SEED"] == "0":
    print("no data shard for seed 0", file=sys.stderr, flush=True)
    sys.exit(1)
print("[METRIC] epoch=1 loss=0.5 time=0.1", flush=True)
"""


def fragile_project(work: Path) -> Path:
    """`work` with the user's project folder in it, holding the program that fails on seed 0."""
    (work / "project").mkdir()
    (work / "project" / "fragile.py").write_text(textwrap.dedent(FRAGILE))
    return work


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return fragile_project(tmp_path)


@pytest.fixture
def server(slurm: None, work: Path) -> Iterator[str]:
    with running_server(work, "slurm", {"SCALELAB_PROGRAM_ROOTS": str(work / "project")}) as url:
        yield url


def classified(work: Path, run: dict[str, Any]) -> str:
    """The run's failure kind: the classifier's where it ran; else set here, as the classifier would."""
    if run["failure_kind"] is not None:
        return str(run["failure_kind"])
    with sqlite3.connect(work / "scalelab.db") as db:
        db.execute("UPDATE run SET failure_kind = ? WHERE id = ?", (FailureKind.program_error.value, run["id"]))
    return FailureKind.program_error.value


def failed_experiment(url: str, work: Path, name: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """An experiment of the program on seed 0, once its run has failed: the experiment, the run, its kind."""
    request = program_request(name, work / "project", ["python", "fragile.py"])
    request["base"]["seed"] = 0
    created = submit(url, request)
    original = wait_until_ended(url, created["runs"][0]["id"], work / "server.log")
    assert original["state"] == "failed", original
    return created, original, classified(work, original)


def test_a_failed_program_run_rerun_with_a_change_completes_linked_to_the_original(server, work):
    log = work / "server.log"
    created, original, kind = failed_experiment(server, work, "fails on seed 0")
    url = f"{server}/api/experiments/{created['id']}/rerun"

    # Another kind matches nothing; the change is refused where it makes the run invalid: nothing is submitted.
    other = "out_of_memory" if kind != "out_of_memory" else "hung"
    assert httpx.post(url, json={"kinds": [other]}, timeout=60).status_code == 409
    invalid = httpx.post(url, json={"kinds": [kind], "set": {"seed": -1}}, timeout=60)
    assert invalid.status_code == 422 and invalid.json()["detail"][0]["loc"] == ["body", "set", "seed"]

    answer = httpx.post(url, json={"failed": True, "kinds": [kind], "set": {"seed": 1}}, timeout=60)
    assert answer.status_code == 201, answer.text
    (rerun,) = answer.json()["data"]
    assert (rerun["rerun_of"], rerun["experiment_id"], rerun["spec"]["seed"]) == (original["id"], created["id"], 1)
    done = wait_until_ended(server, rerun["id"], log)
    assert done["state"] == "completed", done
    epochs = httpx.get(f"{server}/api/runs/{rerun['id']}/metrics?kind=epoch", timeout=10).json()["data"]
    assert [record["epoch"] for record in epochs] == [1]

    runs = httpx.get(f"{server}/api/runs?experiment_id={created['id']}", timeout=10).json()["data"]
    assert {run["id"]: (run["state"], run["rerun_of"]) for run in runs} == {
        original["id"]: ("failed", None),
        rerun["id"]: ("completed", original["id"]),
    }
    # The comparison keeps both rows, the failed one as it ended; a seed only tells repeats apart, so the rerun is
    # in the original's series (a change of any other field would have made it a series of its own).
    rows = httpx.get(f"{server}/api/experiments/{created['id']}/compare", timeout=10).json()["data"]
    assert {row["run_id"]: row["state"] for row in rows} == {original["id"]: "failed", rerun["id"]: "completed"}
    assert len({row["series"] for row in rows}) == 1
