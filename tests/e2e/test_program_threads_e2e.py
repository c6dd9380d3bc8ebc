"""A program's threads on the real local Slurm, through the API: with OMP_NUM_THREADS unset, each process is given
one per CPU of its task, and four processes on the 2-core machine are flagged oversubscribed from the hardware its
batch script measured, though the program prints a start record of its own; a value the program's env sets is the
one its processes get."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benches.server_process import running_server
from tests.e2e.runs import output_of, wait_until_ended
from tests.e2e.test_lifecycle import metrics_of, submit

pytestmark = pytest.mark.slurm

# A user's program, standard library only: its own start record (which knows nothing of cores), the threads each
# process was given in a file of its own, and four epochs long enough to be timed.
PROGRAM = """
import json, os
rank = int(os.environ["RANK"])
with open(os.path.join(os.environ["SCALELAB_RUN_DIR"], f"threads-{rank}.txt"), "w") as out:
    out.write(os.environ.get("OMP_NUM_THREADS", "unset"))
if rank == 0:
    start = {"v": 1, "kind": "start", "world_size": int(os.environ["WORLD_SIZE"]), "nodes": 1, "strategy": "ddp",
             "device": "cpu"}
    print("[METRIC] " + json.dumps(start), flush=True)
    for epoch in range(1, 5):
        print("[METRIC] " + json.dumps({"v": 1, "kind": "epoch", "epoch": epoch, "train_loss": 1 / epoch,
                                        "epoch_time_s": 1.5}), flush=True)
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("threads-e2e")


@pytest.fixture(scope="module")
def project(work: Path) -> Path:
    folder = work / "project"
    folder.mkdir()
    (folder / "threads.py").write_text(textwrap.dedent(PROGRAM))
    return folder


@pytest.fixture(scope="module")
def server(slurm: None, work: Path, project: Path) -> Iterator[str]:
    env = {"SCALELAB_POLL_INTERVAL_S": "1", "SCALELAB_PROGRAM_ROOTS": str(project)}
    with running_server(work, "slurm", env) as url:
        yield url


def request(name: str, project: Path, gpus: int, **program: Any) -> dict[str, Any]:
    return {
        "name": name,
        "base": {"kind": "program", "strategy": "ddp", "gpus": gpus,
                 "program": {"command": ["python", "threads.py"], "workdir": str(project), "launcher": "srun",
                             **program}},
        "resources": {"nodes": 1, "time_limit": "00:05:00"},
    }  # fmt: skip


@pytest.fixture(scope="module")
def experiments(server: str, project: Path) -> dict[str, dict[str, Any]]:
    """Both experiments submitted before either is waited on: they run side by side."""
    return {
        "unset": submit(server, request("threads unset", project, 4)),
        "own": submit(server, request("threads of its own", project, 1, env={"OMP_NUM_THREADS": "3"})),
    }


def finished(server: str, experiment: dict[str, Any], work: Path) -> tuple[dict[str, Any], Path]:
    """The experiment's one run once read to its end, completed, and its run directory."""
    (run,) = experiment["runs"]
    ended = wait_until_ended(server, run["id"], work / "server.log", timeout_s=300)
    assert ended["state"] == "completed", (ended["message"], output_of(server, run["id"]))
    return ended, Path(ended["run_dir"])


def hardware_and_flags(server: str, run_id: str) -> tuple[dict[str, Any], set[str]]:
    """The node the batch script measured (its start record: the program's own comes after it), and the flags of
    the run's compare row."""
    starts = [record for record in metrics_of(server, run_id) if record["kind"] == "start"]
    assert len(starts) == 2 and starts[1].get("nodes_hardware") is None, starts  # the script's, then the program's
    (node,) = starts[0]["nodes_hardware"]
    (row,) = httpx.get(f"{server}/api/compare", params={"run_id": run_id}, timeout=10).json()["data"]
    return node, {flag["code"] for flag in row["flags"]}


def test_four_processes_with_threads_unset_get_one_each_and_are_oversubscribed_on_two_cores(server, experiments, work):
    run, run_dir = finished(server, experiments["unset"], work)
    # The local profile asks for no CPUs per task: each of the 4 tasks has Slurm's one CPU, so one thread.
    assert sorted(path.read_text() for path in run_dir.glob("threads-*.txt")) == ["1"] * 4
    node, codes = hardware_and_flags(server, run["id"])
    assert (node["ranks"], node["intra_op_threads"], node["cpus_allocated"]) == ([0, 1, 2, 3], 1, 4)
    assert node["cpus_given"] == len(os.sched_getaffinity(0))  # the local Slurm binds no task to its CPUs
    # 4 processes x 1 thread on the CPUs the node gives them: on CI's and this machine's 2 cores, contention.
    assert ("oversubscribed" in codes) is (node["cpus_given"] < 4), codes
    if os.cpu_count() == 2:
        assert "oversubscribed" in codes


def test_threads_the_programs_env_sets_are_the_ones_its_processes_get(server, experiments, work):
    run, run_dir = finished(server, experiments["own"], work)
    assert (run_dir / "threads-0.txt").read_text() == "3"
    node, codes = hardware_and_flags(server, run["id"])
    assert (node["ranks"], node["intra_op_threads"], node["cpus_allocated"]) == ([0], 3, 1)
    assert ("oversubscribed" in codes) is (node["cpus_given"] < 3), codes
