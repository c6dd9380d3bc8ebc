"""Runs kept apart, and which code ran, on the real local Slurm through the API: a program that saves a snapshot in
its working directory and resumes from it, as a well-known DDP tutorial does, on 1 and 2 processes of one
experiment; in the workdir the runs share it is flagged shared_workdir, naming the file and the run that wrote it,
and with cwd run_dir it is not. Its script edited between two experiments: the code's sha256 differs, and the first
run's code says its script changed since.

The runs of one experiment take turns on the local profile's one node (the first has ended when the second starts);
the two experiments run side by side, each in a workdir of its own.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benches.server_process import running_server
from tests.e2e.runs import output_of, wait_until_ended
from tests.e2e.test_lifecycle import metrics_of, submit

pytestmark = [pytest.mark.slurm]

# Standard library only, seconds: three epochs, a snapshot after each, resumed from where it is found. The snapshot is
# replaced whole (written aside, then renamed): a rank that starts late, under load, reads the last one, never a file
# rank 0 has only just opened for writing.
SNAPSHOT = """
import json, os
rank = int(os.environ.get("RANK", "0"))
done = 0
if os.path.exists("snapshot.pt"):
    with open("snapshot.pt") as kept:
        done = json.load(kept)["epoch"]
    print(f"resuming from the snapshot at epoch {done}", flush=True)
for epoch in range(done + 1, 4):
    if rank == 0:
        print(f"[METRIC] epoch={epoch} loss={1 / epoch:.3f} time=0.2", flush=True)
        with open("snapshot.pt.writing", "w") as kept:
            json.dump({"epoch": epoch}, kept)
        os.replace("snapshot.pt.writing", "snapshot.pt")
"""


def request(name: str, workdir: Path, **program: Any) -> dict[str, Any]:
    return {
        "name": name,
        "base": {"kind": "program", "strategy": "ddp", "gpus": 1,
                 "program": {"command": ["python", "train.py"], "workdir": str(workdir), **program}},
        "grid": {"gpus": [1, 2]},
        "resources": {"nodes": 1, "time_limit": "00:05:00"},
    }  # fmt: skip


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("workdir-e2e")


@pytest.fixture(scope="module")
def project(work: Path) -> Path:
    """Two copies of the user's project: one whose runs share it, one whose runs start in their own directories."""
    folder = work / "project"
    for name in ("shared", "apart"):
        (folder / name).mkdir(parents=True)
        (folder / name / "train.py").write_text(textwrap.dedent(SNAPSHOT))
    return folder


@pytest.fixture(scope="module")
def server(slurm: None, work: Path, project: Path) -> Iterator[str]:
    env = {"SCALELAB_POLL_INTERVAL_S": "1", "SCALELAB_PROGRAM_ROOTS": str(project)}
    with running_server(work, "slurm", env) as url:
        yield url


@pytest.fixture(scope="module")
def experiments(server: str, project: Path) -> dict[str, dict[str, Any]]:
    return {
        "shared": submit(server, request("snapshot in the shared workdir", project / "shared")),
        "apart": submit(server, request("snapshot in each run's directory", project / "apart", cwd="run_dir")),
    }


def ended(server: str, experiment: dict[str, Any], work: Path) -> list[dict[str, Any]]:
    runs = [wait_until_ended(server, run["id"], work / "server.log", timeout_s=300) for run in experiment["runs"]]
    for run in runs:
        assert run["state"] == "completed", output_of(server, run["id"])
    return runs


def flags_by_run(server: str, experiment: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    response = httpx.get(f"{server}/api/compare", params={"experiment_id": experiment["id"]}, timeout=10)
    assert response.status_code == 200, response.text
    return {row["run_id"]: row["flags"] for row in response.json()["data"]}


def code_of(server: str, run_id: str) -> dict[str, Any]:
    response = httpx.get(f"{server}/api/runs/{run_id}/code", timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_run_that_found_a_siblings_snapshot_in_the_shared_workdir_is_flagged(server, experiments, work):
    first, second = ended(server, experiments["shared"], work)
    # What went wrong, as the tutorial showed it: the second run resumed from the first's snapshot.
    assert "resuming from the snapshot at epoch 3" in output_of(server, second["id"])
    flags = flags_by_run(server, experiments["shared"])
    shared = [flag for flag in flags[second["id"]] if flag["code"] == "shared_workdir"]
    assert len(shared) == 1, flags
    assert f"run {second['id']} started with snapshot.pt written by run {first['id']}" in shared[0]["message"]
    assert "cwd run_dir" in shared[0]["message"] and "SCALELAB_RUN_DIR" in shared[0]["message"]
    assert not [flag for flag in flags[first["id"]] if flag["code"] == "shared_workdir"], flags


def test_runs_that_start_in_their_own_directories_are_not_flagged_and_keep_their_snapshots(
    server, experiments, work, project
):
    runs = ended(server, experiments["apart"], work)
    flags = flags_by_run(server, experiments["apart"])
    assert not [flag for run in runs for flag in flags[run["id"]] if flag["code"] == "shared_workdir"], flags
    # Each run trained its three epochs from scratch, its snapshot in its own directory, none in the workdir.
    for run in runs:
        assert [record["epoch"] for record in metrics_of(server, run["id"]) if record["kind"] == "epoch"] == [1, 2, 3]
        assert (Path(run["run_dir"]) / "snapshot.pt").is_file()
    assert not (project / "apart" / "snapshot.pt").exists()


def test_the_code_hash_changes_with_the_script_and_the_earlier_run_says_so(server, experiments, work, project):
    before = ended(server, experiments["apart"], work)[0]
    noted = code_of(server, before["id"])
    assert noted["noted"] and noted["now"] == "same", noted
    assert noted["code"]["script"]["name"] == "train.py"
    (project / "apart" / "train.py").write_text(textwrap.dedent(SNAPSHOT) + "# edited: three epochs still\n")
    edited = submit(server, {**request("after an edit", project / "apart", cwd="run_dir"), "grid": {}})
    (after,) = ended(server, edited, work)
    assert code_of(server, after["id"])["code"]["script"]["sha256"] != noted["code"]["script"]["sha256"]
    changed = code_of(server, before["id"])
    assert changed["now"] == "changed" and "its script changed since it ran" in changed["note"], changed
    page = httpx.get(f"{server}/runs/{before['id']}", timeout=10).text
    assert 'data-now="changed"' in page and "its script changed since it ran" in page
