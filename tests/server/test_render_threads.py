"""A program's threads and hardware in its batch script: OMP_NUM_THREADS from the CPUs each process is given unless
the program's env sets it, and the start record's nodes_hardware as the script measures it on its node (run here
with bash against stand-ins for srun and scontrol; test_render_program_run.py runs it on the real Slurm)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from contract.records import StartRecord, parse_metric_line
from server.profiles import BUILTIN_DIR, load_profile
from server.render import NPROC, render_script
from tests.server.test_render import job
from tests.server.test_render_program import fake_slurm, probe_job, probe_workdir, program_spec, srun_words

DEFAULT = 'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"'


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_each_process_gets_its_cpus_as_threads_unless_the_program_sets_them(launcher):
    script = render_script(program_spec(launcher=launcher), job("local"))
    assert DEFAULT in script.splitlines()
    # Containers are told to pass it in, as the program's own variables.
    assert "--env=OMP_NUM_THREADS" in srun_words(render_script(program_spec(launcher=launcher), job("podman")))
    own = render_script(program_spec(launcher=launcher, env={"OMP_NUM_THREADS": "4"}), job("local"))
    assert DEFAULT not in own and "export OMP_NUM_THREADS=4" in own.splitlines()


def test_a_profile_that_sets_the_threads_is_not_overridden():
    profile = load_profile(BUILTIN_DIR / "local.toml")
    profile = profile.model_copy(update={"env": {**profile.env, "OMP_NUM_THREADS": "2"}})
    script = render_script(program_spec(), probe_job(Path("/runs/r1"), profile=profile))
    assert DEFAULT not in script and "export OMP_NUM_THREADS=2" in script.splitlines()


def test_without_slurm_each_process_gets_its_share_of_the_machine():
    script = render_script(program_spec(), probe_job(Path("/runs/r1"), launcher="local"))
    assert f"threads=$(($({NPROC}) / 2))" in script.splitlines()


def test_the_worker_sets_its_own_threads():
    assert "OMP_NUM_THREADS" not in render_script(
        program_spec().model_copy(update={"program": None, "kind": "train"}), job("local")
    )


def run(tmp_path: Path, slurm_env: dict[str, str], **program: Any) -> tuple[StartRecord, dict[str, str]]:
    """The script of a two-process program run with bash on this machine: its start record, and what the task's
    environment held."""
    workdir = probe_workdir(tmp_path)
    spec = program_spec(["python", "probe.py"], workdir=str(workdir), **program)
    run_job = probe_job(tmp_path / "run")
    run_job.run_dir.mkdir()
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(spec, run_job))
    env = {**fake_slurm(tmp_path), **slurm_env}
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    record = parse_metric_line(result.stdout.splitlines()[0])
    assert isinstance(record, StartRecord), result.stdout
    seen = json.loads((tmp_path / "run" / "probe-0.json").read_text())
    return record, seen["env"]


def test_the_start_record_carries_the_nodes_hardware_and_the_threads_given(tmp_path):
    record, env = run(tmp_path, {"SLURM_CPUS_ON_NODE": "2"})
    assert env["OMP_NUM_THREADS"] == "1"  # no --cpus-per-task: a task's one CPU
    (node,) = record.nodes_hardware or []
    affinity = os.sched_getaffinity(0)
    assert (node.host, node.ranks, node.intra_op_threads, node.cpus_allocated) == (record.hostname, [0, 1], 1, 2)
    assert (node.hardware_threads, node.cpus_given) == (os.cpu_count(), len(affinity))
    assert node.affinity and node.affinity[0].isdigit() and set(node.affinity) <= set("0123456789,-")
    assert node.physical_cores is None or 1 <= node.physical_cores <= node.hardware_threads
    assert node.oversubscribed is (len(affinity) < 2)


def test_cpus_per_task_become_the_threads(tmp_path):
    record, env = run(tmp_path, {"SLURM_CPUS_PER_TASK": "3"})
    assert env["OMP_NUM_THREADS"] == "3"
    (node,) = record.nodes_hardware or []
    assert (node.intra_op_threads, node.cpus_allocated) == (3, None)


@pytest.mark.parametrize(("given", "counted"), [("007", 7), ("4,2", 4), ("", None), ("lots", None)])
def test_the_programs_own_threads_are_kept_and_read_as_a_number(tmp_path, given, counted):
    """The task gets the value as the program's env says it; the record counts its first number, or (unset, empty
    or no number, when OpenMP takes a thread per CPU) the CPUs the process may run on."""
    record, env = run(tmp_path, {}, env={"OMP_NUM_THREADS": given})
    assert env["OMP_NUM_THREADS"] == given
    (node,) = record.nodes_hardware or []
    assert node.intra_op_threads == (counted or len(os.sched_getaffinity(0)))
