"""A program's batch script run on the real local Slurm: two processes under each launcher, in a run directory the
server made and in one the job makes itself, and on two nodes; what each process is told."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from contract.records import CodeRecord, StartRecord, WorkdirRecord, parse_metric_line
from contract.spec import RunSpec
from server.profiles import BUILTIN_DIR
from server.render import render_script
from tests.server.test_render_program import probe_job

pytestmark = pytest.mark.slurm

# A program of the standard library only: says what it was given, one file per process. Not on stdout: Slurm forwards
# the tasks' output in pieces, and lines of tasks on two nodes have merged in the job's output file (seen in CI).
PROBE = """import json, os, socket, sys
names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GREETING",
         "SCALELAB_PARAM_LR", "SCALELAB_PARAM_TAG", "SCALELAB_STRATEGY", "SCALELAB_SEED", "SCALELAB_RUN_ID",
         "SCALELAB_RUN_DIR", "SLURM_JOB_ID"]
seen = {"argv": sys.argv[1:], "cwd": os.getcwd(), "env": {name: os.environ.get(name) for name in names}}
os.makedirs("seen", exist_ok=True)
with open(os.path.join("seen", socket.gethostname() + "-" + str(os.getpid()) + ".json"), "w") as report:
    json.dump(seen, report)
"""


TWO_NODES = Path(__file__).resolve().parents[1] / "e2e" / "profiles" / "twonode.toml"


def _spec(workdir: Path, launcher: str, command: list[str], gpus: int = 2, nodes: int = 1) -> RunSpec:
    program: dict[str, Any] = {
        "command": command,
        "workdir": str(workdir),
        "launcher": launcher,
        "env": {"GREETING": "hello world"},
        "params": {"lr": 0.05, "tag": "x y"},
    }
    layout = {"gpus": gpus, "nodes": nodes}
    return RunSpec.model_validate({"kind": "program", **layout, "strategy": "ddp", "seed": 5, "program": program})


def _submit(
    tmp_path: Path,
    spec: RunSpec,
    job_creates_dir: bool,
    profile_path: Path = BUILTIN_DIR / "local.toml",
    env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """Run the script on Slurm (`env` chooses the cluster) to its end: its exit code, output.log and job id."""
    runs = tmp_path / "runs"
    runs.mkdir()
    run_dir = runs / "run1"
    if not job_creates_dir:
        run_dir.mkdir()
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(spec, probe_job(run_dir, profile_path, job_creates_dir=job_creates_dir)))
    result = subprocess.run(
        ["sbatch", "--parsable", "--wait", f"--chdir={tmp_path}", str(script)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )
    job_id = result.stdout.strip().split(";")[0]
    return result.returncode, (run_dir / "output.log").read_text(), job_id


def _probes(workdir: Path) -> list[dict[str, Any]]:
    seen = [json.loads(report.read_text()) for report in (workdir / "seen").glob("*.json")]
    return sorted(seen, key=lambda process: int(process["env"]["RANK"]))


@pytest.mark.parametrize("job_creates_dir", [False, True], ids=["server-dir", "job-dir"])
@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_each_process_is_told_its_rank_the_rendezvous_its_parameters_and_env(
    slurm, tmp_path, launcher, job_creates_dir
):
    workdir = tmp_path / "proj"
    workdir.mkdir()
    (workdir / "probe.py").write_text(PROBE)
    code, output, job_id = _submit(tmp_path, _spec(workdir, launcher, ["python", "probe.py", "a b"]), job_creates_dir)
    assert code == 0, output
    seen = _probes(workdir)
    assert len(seen) == 2, output
    for rank, process in enumerate(seen):
        env = process["env"]
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (
            str(rank),
            str(rank),
            "2",
            "2",
        )
        assert process["argv"] == ["a b", "--lr", "0.05", "--tag", "x y"]
        assert process["cwd"] == str(workdir)
        assert env["GREETING"] == "hello world"
        assert (env["SCALELAB_PARAM_LR"], env["SCALELAB_PARAM_TAG"]) == ("0.05", "x y")
        assert (env["SCALELAB_STRATEGY"], env["SCALELAB_SEED"], env["SCALELAB_RUN_ID"]) == ("ddp", "5", "run1")
        assert env["SCALELAB_RUN_DIR"] == str(tmp_path / "runs" / "run1")
        assert env["SLURM_JOB_ID"] == job_id
    # Both meet at one address and port (torchrun's processes at its own store, beside the agents' port).
    assert seen[0]["env"]["MASTER_ADDR"] == seen[1]["env"]["MASTER_ADDR"]
    assert seen[0]["env"]["MASTER_PORT"] == seen[1]["env"]["MASTER_PORT"]
    if launcher == "srun":
        assert seen[0]["env"]["MASTER_PORT"] == str(20000 + int(job_id) % 12000)
    records = [parse_metric_line(line) for line in output.splitlines() if line.startswith("[METRIC]")]
    starts = [record for record in records if isinstance(record, StartRecord)]
    assert len(starts) == 1, output
    # The probe noted which code started, and what the run wrote in the workdir it shares.
    (noted,) = [record for record in records if isinstance(record, CodeRecord)]
    assert noted.script is not None and noted.script.sha256 == hashlib.sha256(PROBE.encode()).hexdigest(), output
    (wrote,) = [record for record in records if isinstance(record, WorkdirRecord) and record.phase == "end"]
    written = sorted(f"seen/{report.name}" for report in (workdir / "seen").glob("*.json"))
    assert sorted(file.name for file in wrote.files if file.created) == written, output
    assert (starts[0].world_size, starts[0].nodes, starts[0].strategy) == (2, 1, "ddp")
    assert starts[0].hostname, "the node's name, from the script"


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_a_missing_program_fails_the_job_with_its_name_in_the_output(slurm, tmp_path, launcher):
    workdir = tmp_path / "proj"
    workdir.mkdir()
    code, output, _ = _submit(tmp_path, _spec(workdir, launcher, ["python", "trian.py"]), job_creates_dir=True)
    assert code == 2
    assert output.endswith(f"scalelab: the program file trian.py does not exist in {workdir}\n")


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_two_nodes_meet_at_the_first_with_a_rank_per_process(slurm2_env, tmp_path, launcher):
    workdir = tmp_path / "proj"
    workdir.mkdir()
    (workdir / "probe.py").write_text(PROBE)
    spec = _spec(workdir, launcher, ["python", "probe.py"], gpus=4, nodes=2)
    code, output, _ = _submit(tmp_path, spec, job_creates_dir=False, profile_path=TWO_NODES, env=slurm2_env)
    assert code == 0, output
    seen = _probes(workdir)
    assert [process["env"]["RANK"] for process in seen] == ["0", "1", "2", "3"], output
    assert [process["env"]["LOCAL_RANK"] for process in seen] == ["0", "1", "0", "1"]
    assert {(process["env"]["WORLD_SIZE"], process["env"]["LOCAL_WORLD_SIZE"]) for process in seen} == {("4", "2")}
    assert len({process["env"]["MASTER_ADDR"] for process in seen}) == 1
