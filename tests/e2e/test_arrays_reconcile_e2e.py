"""A server killed on the real two-node Slurm right after `sbatch --array` answered, before it recorded the tasks'
job ids: started again, it finds each run as its task of the array and follows it to its end, and submits nothing
again (sbatch is counted by a wrapper in front of the real one, which also does the killing; Slurm holds one job
per run)."""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import slurm2_server_in
from tests.e2e.runs import output_of, wait_until_ended
from tests.e2e.test_lifecycle import events_of

pytestmark = [pytest.mark.slurm]

RUNS = 3
PROGRAM = """
    import os
    print(f"seed {os.environ['SCALELAB_SEED']} task {os.environ.get('SLURM_ARRAY_TASK_ID')}", flush=True)
"""
# In front of the real sbatch: notes each call; the first array's it submits, keeps Slurm's answer, and then kills
# the server that ran it (its parent) before the server can read the answer: as a crash or a power cut would.
SBATCH_WRAPPER = """#!/bin/bash
echo "$*" >> {calls}
case "$*" in
    */.arrays/*)
        if [ ! -e {answer} ]; then
            {real} "$@" > {answer}
            kill -KILL "$PPID"
            exit 1
        fi
        ;;
esac
exec {real} "$@"
"""


def request(programs: Path) -> dict[str, Any]:
    return {
        "name": "array reconcile e2e",
        "base": {"kind": "program", "strategy": "ddp", "gpus": 1,
                 "program": {"command": ["python", "seed.py"], "workdir": str(programs)}},
        "grid": {"seed": list(range(RUNS))},
        "isolation": "shared",
        "resources": {"nodes": 1, "time_limit": "00:10:00"},
    }  # fmt: skip


def slurm_rows(argv: list[str], env: dict[str, str]) -> list[str]:
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return [line for line in result.stdout.splitlines() if line.strip()]


def test_a_server_killed_after_sbatch_array_finds_the_tasks_and_submits_nothing_again(
    slurm2_env: dict[str, str], tmp_path: Path
) -> None:
    programs = tmp_path / "project"
    programs.mkdir()
    (programs / "seed.py").write_text(textwrap.dedent(PROGRAM))
    wrapped = tmp_path / "bin"
    wrapped.mkdir()
    real = shutil.which("sbatch", path=slurm2_env["PATH"])
    assert real is not None
    calls, answer = tmp_path / "sbatch.calls", tmp_path / "array.answer"
    quoted = {"calls": str(calls), "answer": str(answer), "real": real}
    (wrapped / "sbatch").write_text(SBATCH_WRAPPER.format(**{key: shlex.quote(path) for key, path in quoted.items()}))
    (wrapped / "sbatch").chmod(0o755)
    env = {"SCALELAB_PROGRAM_ROOTS": str(programs), "PATH": f"{wrapped}:{slurm2_env['PATH']}"}
    log = tmp_path / "server.log"
    try:
        with slurm2_server_in(tmp_path, slurm2_env, **env) as url, pytest.raises(httpx.HTTPError):
            httpx.post(f"{url}/api/experiments", json=request(programs), timeout=120)  # the server dies answering
        array = answer.read_text().strip().split(";")[0]
        assert array.isdigit(), answer.read_text()

        with slurm2_server_in(tmp_path, slurm2_env, **env) as url:
            listed = httpx.get(f"{url}/api/runs", params={"limit": 100}, timeout=30).json()["data"]
            runs = sorted(listed, key=lambda run: run["position"])
            assert len(runs) == RUNS
            ended = [wait_until_ended(url, run["id"], log, timeout_s=600) for run in runs]
            assert [run["job_id"] for run in ended] == [f"{array}_{task}" for task in range(RUNS)]
            assert [run["state"] for run in ended] == ["completed"] * RUNS
            for task, run in enumerate(ended):
                assert f"seed {task} task {task}\n" in output_of(url, run["id"])
                found = [event["detail"] for event in events_of(url, run["id"]) if event["kind"] == "reconciled"]
                assert found == [f"found its job after a server restart: task {task} of array job {array}"]
        # The array went once, and no run went again as a job of its own.
        assert len(calls.read_text().splitlines()) == 1, calls.read_text()
        names = ",".join(f"scalelab-{run['id']}" for run in runs)
        sacct = ["sacct", "--noheader", "--parsable2", "--allocations", "--starttime=now-1days", "--format=JobID"]
        assert slurm_rows([*sacct, f"--name={names}"], slurm2_env) == []
        assert sorted(slurm_rows([*sacct, f"--jobs={array}"], slurm2_env)) == [f"{array}_{t}" for t in range(RUNS)]
    finally:
        if answer.exists():  # whatever the test left running
            with contextlib.suppress(subprocess.SubprocessError):
                subprocess.run(["scancel", answer.read_text().strip().split(";")[0]], env=slurm2_env, timeout=30)
