"""A user's program in its batch script: its words only as arguments of fixed shell text, how each launcher starts
it, where it starts, what it is told, and what stops the job before it launches.

The scripts run here with bash, against stand-ins for srun and scontrol on one node (test_render_program_run.py runs
them on the real Slurm, with several processes).
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contract.records import CodeRecord, StartRecord, WorkdirRecord, parse_metric_line
from contract.spec import RunSpec
from server.profiles import BUILTIN_DIR, load_profile
from server.render import SRUN_TASK, TASK_NAME, TORCHRUN_TASK, BatchJob, render_script
from tests.server.test_render import job

WORKDIR = "/home/alice/proj"
PYTHON = "/opt/scalelab/venv/bin/python"  # the worker's Python of test_render.job


def program_spec(command: list[str] | None = None, **program: Any) -> RunSpec:
    """A two-process program run; `program` replaces fields of its program."""
    fields = {"command": command or ["python", "train.py"], "workdir": WORKDIR, **program}
    return RunSpec.model_validate({"kind": "program", "gpus": 2, "strategy": "ddp", "seed": 3, "program": fields})


def unvalidated(spec: RunSpec, **program: Any) -> RunSpec:
    """The spec with program fields replaced past validation: what the renderer does with them on its own."""
    assert spec.program is not None
    return spec.model_copy(update={"program": spec.program.model_copy(update=program)})


def srun_words(script: str) -> list[str]:
    """The words of the script's srun command, as bash reads them."""
    # Up to its end: a blank line, or (a shared workdir's run, noted after the launch) the status it keeps.
    command = script[script.index("\nsrun ") + 1 :].split("\n\n")[0].split(" || status=$?")[0]
    return shlex.split(command.replace("\\\n", " "))


def local_words(script: str) -> list[str]:
    """The words of the script's command without Slurm (exec timeout ... torchrun ...)."""
    return shlex.split(script[script.index("\nexec timeout ") + len("\nexec ") :])


def after(words: list[str], marker: str) -> list[str]:
    return words[words.index(marker) + 1 :]


# ---- how the command is launched ------------------------------------------------------------------------------


def test_the_srun_launcher_gives_the_users_words_to_fixed_shell_text_as_arguments():
    spec = program_spec(["python", "train.py", "--epochs", "3"], params={"lr": 0.1})
    words = srun_words(render_script(spec, job("local")))
    assert words[:3] == ["srun", "--kill-on-bad-exit=1", "--ntasks-per-node=2"]
    assert after(words, "-c") == [SRUN_TASK, TASK_NAME, WORKDIR, PYTHON, "train.py", "--epochs", "3", "--lr", "0.1"]


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_params_style_env_puts_no_parameter_after_the_command(launcher):
    spec = program_spec(["python", "train.py", "--epochs", "3"], params={"lr": 0.1}, params_style="env",
                        launcher=launcher)  # fmt: skip
    script = render_script(spec, job("local"))
    assert after(srun_words(script), "-c")[-3:] == ["train.py", "--epochs", "3"]
    assert "export SCALELAB_PARAM_LR=0.1\n" in script


def test_the_torchrun_launcher_runs_one_task_per_node_with_all_of_its_cpus():
    spec = RunSpec.model_validate(
        {"kind": "program", "gpus": 8, "nodes": 2, "program": {**_program(), "launcher": "torchrun"}}
    )
    script = render_script(spec, job("pyxis"))
    words = srun_words(script)
    # pyxis's partition gives each GPU's task 16 CPUs: torchrun's one task per node gets them all.
    assert words[:5] == ["srun", "--kill-on-bad-exit=1", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=64"]
    assert "#SBATCH --ntasks-per-node=4\n" in script  # the allocation still holds a slot per GPU
    torchrun = ["--nnodes=2", "--nproc-per-node=4", "train.py"]
    assert after(words, "-c") == [TORCHRUN_TASK, TASK_NAME, WORKDIR, "python3", *torchrun]


def _program(**fields: Any) -> dict[str, Any]:
    return {"command": ["python", "train.py"], "workdir": WORKDIR, **fields}


@pytest.mark.parametrize(
    ("command", "started"),
    [
        (["python", "train.py", "-x"], ["train.py", "-x"]),
        (["python", "-m", "pkg.train", "--a", "1"], ["-m", "pkg.train", "--a", "1"]),
        # Python's own options would be read as torchrun's: Python runs as the executable then.
        (["python", "-u", "train.py"], ["--no-python", PYTHON, "-u", "train.py"]),
        (["python", "-m", "-x"], ["--no-python", PYTHON, "-m", "-x"]),
        (["python"], ["--no-python", PYTHON]),
        (["./run.sh", "a b"], ["--no-python", "./run.sh", "a b"]),
        (["pythonic", "x"], ["--no-python", "pythonic", "x"]),
    ],
)
def test_torchrun_starts_a_script_a_module_or_an_executable(command, started):
    for launcher in ("srun", "torchrun"):  # without Slurm, torchrun starts the processes for either
        script = render_script(program_spec(command, launcher=launcher), job("local", launcher="local"))
        assert after(local_words(script), "--nproc-per-node=2") == started
    slurm = render_script(program_spec(command, launcher="torchrun"), job("local"))
    assert after(srun_words(slurm), "--nproc-per-node=2") == started


@pytest.mark.parametrize(
    ("profile", "python"), [("local", PYTHON), ("pyxis", "python3"), ("cscs", "python3"), ("podman", "python3")]
)
def test_python_is_the_profiles_own(profile, python):
    words = srun_words(render_script(program_spec(), job(profile)))
    assert words[-2:] == [python, "train.py"]


def test_the_program_runs_in_its_directory_mounted_in_every_container():
    def mounts(profile: str) -> list[str]:
        return [word for word in srun_words(render_script(program_spec(), job(profile))) if WORKDIR in word]

    assert f"--container-workdir={WORKDIR}" in mounts("pyxis")
    assert any(f"{WORKDIR}:{WORKDIR}" in word.split(",") for word in mounts("pyxis"))
    assert any(WORKDIR in word.split(",") for word in mounts("apptainer") if word.startswith("--bind="))
    assert {f"--volume={WORKDIR}:{WORKDIR}", f"--workdir={WORKDIR}"} <= set(mounts("podman"))
    # Every runtime: the task's shell enters it too (CSCS's environment definition starts elsewhere).
    assert after(srun_words(render_script(program_spec(), job("cscs"))), "-c")[2] == WORKDIR


def test_a_programs_image_replaces_the_profiles():
    words = srun_words(render_script(program_spec(), job("podman", image="registry.example/alice/train:1")))
    assert "registry.example/alice/train:1" in words and "localhost/scalelab-worker:latest" not in words
    assert "--entrypoint=sh" in words  # the per-task shell, not the worker's python


def test_a_program_is_never_signalled_before_its_time_limit():
    # USR1's default action ends a process; the worker's checkpoint-and-requeue is not a program's protocol.
    script = render_script(program_spec(), job("pyxis"))
    assert "--signal" not in script and "--requeue" not in script and "scontrol requeue" not in script


# ---- what the program is told ---------------------------------------------------------------------------------


def test_the_environment_is_the_programs_own_then_scalelabs():
    spec = program_spec(env={"OMP_NUM_THREADS": "2", "NCCL_DEBUG": "INFO"}, params={"lr": 0.1, "tag": "a b"})
    script = render_script(spec, job("pyxis"))
    exports = [line for line in script.splitlines() if line.startswith("export ")]
    assert exports.index("export NCCL_DEBUG=INFO") > exports.index("export NCCL_DEBUG=WARN")  # the profile's first
    expected = ["export OMP_NUM_THREADS=2", "export SCALELAB_PARAM_LR=0.1", "export SCALELAB_PARAM_TAG='a b'"]
    expected += ["export SCALELAB_STRATEGY=ddp", "export SCALELAB_SEED=3", "export SCALELAB_RUN_ID=0123456789"]
    expected += ["export SCALELAB_RUN_DIR=/shared/scalelab/runs/0123456789"]
    assert set(expected) <= set(exports)
    podman = srun_words(render_script(spec, job("podman")))
    for name in ("OMP_NUM_THREADS", "NCCL_DEBUG", "SCALELAB_PARAM_TAG", "SCALELAB_STRATEGY", "SCALELAB_RUN_DIR"):
        assert f"--env={name}" in podman


def test_names_and_directories_that_would_break_the_script_are_refused_even_unvalidated():
    with pytest.raises(ValueError, match="unsafe environment variable name: 'A B'"):
        render_script(unvalidated(program_spec(), env={"A B": "x"}), job("local"))
    with pytest.raises(ValueError, match="unsafe environment variable name: 'SCALELAB_PARAM_X;Y'"):
        render_script(unvalidated(program_spec(), params={"x;y": 1}), job("local"))
    with pytest.raises(ValueError, match="unsafe program workdir"):
        render_script(unvalidated(program_spec(), workdir="/home/a,b:/etc"), job("pyxis"))


# ---- the script run with bash --------------------------------------------------------------------------------

# Stands for srun on one node: drops srun's options and runs the command once, as the step's only task.
FAKE_SRUN = """#!/bin/bash
while [[ $1 == -* ]]; do shift; done
echo srun-ran >>"$SCALELAB_TEST_DIR/srun.log"
export SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NTASKS=1 SLURM_NTASKS_PER_NODE=1 SLURM_NODEID=0
exec "$@"
"""
FAKE_SCONTROL = "#!/bin/bash\necho localhost\n"
# The program: tells what it was given, in a file of its own per rank.
PROBE = """import json, os, sys
with open(os.path.join(os.environ["SCALELAB_RUN_DIR"], "probe-%s.json" % os.environ["RANK"]), "w") as out:
    json.dump({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}, out)
"""


def fake_slurm(directory: Path) -> dict[str, str]:
    """The environment of a batch script on a node, with srun and scontrol stand-ins first on PATH."""
    bin_dir = directory / "fake-slurm"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    path = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
    return {
        "PATH": path,
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "localhost",
        "SCALELAB_TEST_DIR": str(directory),
    }


def probe_job(run_dir: Path, profile_path: Path = BUILTIN_DIR / "local.toml", **changes: Any) -> BatchJob:
    """A batch job of the profile (the local one's by default), with the tests' Python as the worker's."""
    profile = load_profile(profile_path)
    fields: dict[str, Any] = {
        "run_id": run_dir.name,
        "run_dir": run_dir,
        "time_limit": "00:03:00",
        "profile": profile,
        "partition": profile.default_partition,
        "worker_python": Path(sys.executable),  # torchrun's Python too: the tests' own has torch
    }
    return BatchJob(**{**fields, **changes})


def run_script(tmp_path: Path, spec: RunSpec, job: BatchJob | None = None) -> subprocess.CompletedProcess[str]:
    """The script of `spec` run with bash, by default in the run directory tmp_path/run, which the server made."""
    if job is None:
        job = probe_job(tmp_path / "run")
        job.run_dir.mkdir(exist_ok=True)
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(spec, job))
    env = fake_slurm(tmp_path)
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=120, check=False)


def probe_workdir(tmp_path: Path) -> Path:
    workdir = tmp_path / "proj"
    workdir.mkdir()
    (workdir / "probe.py").write_text(PROBE)
    return workdir


def test_the_task_gets_its_words_its_directory_and_the_spec_start(tmp_path):
    workdir = probe_workdir(tmp_path)
    spec = program_spec(["python", "probe.py", "a b"], workdir=str(workdir), params={"lr": 0.5})
    result = run_script(tmp_path, spec)
    assert result.returncode == 0, result.stderr
    seen = json.loads((tmp_path / "run" / "probe-0.json").read_text())
    assert seen["argv"] == ["a b", "--lr", "0.5"] and seen["cwd"] == str(workdir)
    # The fake srun runs the step's only task.
    launch = {name: seen["env"][name] for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    assert launch == {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    assert seen["env"]["SCALELAB_PARAM_LR"] == "0.5" and seen["env"]["MASTER_ADDR"] == "localhost"
    record = parse_metric_line(result.stdout.splitlines()[0])
    assert isinstance(record, StartRecord)
    assert (record.world_size, record.nodes, record.strategy, record.hostname) == (2, 1, "ddp", socket.gethostname())
    assert record.device is None and record.torch_version is None  # only the program knows them
    assert (record.model_extra or {}).get("source") == "spec"


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_a_missing_program_file_stops_the_job_before_launching_naming_it(tmp_path, launcher):
    workdir = probe_workdir(tmp_path)
    spec = program_spec(["python", "nope.py"], workdir=str(workdir), launcher=launcher)
    result = run_script(tmp_path, spec)
    assert result.returncode == 2
    assert result.stderr == f"scalelab: the program file nope.py does not exist in {workdir}\n"
    assert not (tmp_path / "srun.log").exists() and "[METRIC]" not in result.stdout


def test_a_missing_working_directory_stops_the_job_naming_it(tmp_path):
    gone = tmp_path / "gone"
    result = run_script(tmp_path, program_spec(workdir=str(gone)))
    assert result.returncode == 2
    assert result.stderr.endswith(f"scalelab: cannot enter the working directory {gone}\n")
    assert not (tmp_path / "srun.log").exists()


@pytest.mark.parametrize(
    ("profile", "command", "checked"),
    [
        ("local", ["python", "train.py"], "train.py"),
        ("local", ["python", "/opt/x/train.py"], "/opt/x/train.py"),
        ("local", ["./run.sh"], "./run.sh"),
        ("pyxis", ["python", "sub/train.py"], "sub/train.py"),  # relative: in the mounted workdir
        ("pyxis", ["python", "/opt/x/train.py"], None),  # absolute in a container: perhaps the image's
        ("pyxis", ["/opt/x/run"], None),
        ("local", ["python", "-m", "pkg"], None),
        ("local", ["python", "-u", "train.py"], None),
        ("local", ["nvidia-smi"], None),  # on PATH
    ],
)
def test_the_program_file_is_checked_where_the_node_sees_it(profile, command, checked):
    script = render_script(program_spec(command), job(profile))
    checks = [line for line in script.splitlines() if line.startswith("[[ -f ")]
    if checked is None:
        assert checks == []
    else:
        assert len(checks) == 1 and checks[0].startswith(f"[[ -f {shlex.quote(checked)} ]] || ")


# ---- where it starts, and the probe of which code ran ----------------------------------------------------------


@pytest.mark.parametrize("profile", ["local", "pyxis", "podman", "apptainer", "cscs"])
def test_with_cwd_run_dir_each_task_starts_in_the_run_directory_running_the_workdirs_file(profile):
    rendered = job(profile)
    words = after(srun_words(render_script(program_spec(cwd="run_dir"), rendered)), "-c")
    assert words[1:3] == [TASK_NAME, str(rendered.run_dir)]
    assert words[-1] == f"{WORKDIR}/train.py"
    # torchrun: the same directory and the workdir's script, as torchrun's own argument.
    torchrun = after(srun_words(render_script(program_spec(cwd="run_dir", launcher="torchrun"), rendered)), "-c")
    assert torchrun[1:3] == [TASK_NAME, str(rendered.run_dir)] and torchrun[-1] == f"{WORKDIR}/train.py"
    # Containers still mount the workdir, where the file is.
    if profile in ("pyxis", "podman", "apptainer"):
        assert any(WORKDIR in word for word in srun_words(render_script(program_spec(cwd="run_dir"), rendered)))


def without_probe_text(script: str) -> str:
    """The script without the probe's own text, which it carries in a here-document."""
    head, rest = script.split("<<'SCALELAB_PROBE'")
    return head + rest.split("\nSCALELAB_PROBE\n")[1]


def test_the_probe_runs_with_the_nodes_python_and_notes_writes_only_in_a_shared_workdir():
    shared = without_probe_text(render_script(program_spec(), job("local")))
    assert "command -v /opt/scalelab/venv/bin/python || command -v python3 || true" in shared
    assert "--state" in shared and shared.count(".workdir_probe.py") == 3  # written, run before, run after
    assert 'exit "$status"' in shared
    apart = without_probe_text(render_script(program_spec(cwd="run_dir"), job("local")))
    assert "--state" not in apart and apart.count(".workdir_probe.py") == 2 and 'exit "$status"' not in apart
    # In a container the image's Python is not the node's: the node's python3, if it has one.
    contained = render_script(program_spec(), job("pyxis"))
    assert "probe_python=$(command -v python3 || true)" in contained


def test_without_a_python_for_the_probe_the_job_goes_on_and_says_its_code_is_unknown(tmp_path):
    workdir = probe_workdir(tmp_path)
    spec = program_spec(["python", "probe.py"], workdir=str(workdir))
    job = probe_job(tmp_path / "run", worker_python=tmp_path / "no-python")
    job.run_dir.mkdir()
    script = tmp_path / "job.sbatch"
    # No python3 on the PATH either (the node's may have one: looked for under another name here).
    script.write_text(render_script(spec, job).replace("command -v python3", "command -v no-such-python3"))
    env = fake_slurm(tmp_path)
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert "could not note which code this run starts: it stays unknown (no Python on the node)" in result.stdout
    assert '"kind":"code"' not in result.stdout
    assert (tmp_path / "srun.log").exists()  # and the job launched all the same


def test_the_probe_notes_the_code_and_what_the_run_wrote_in_the_shared_workdir(tmp_path):
    workdir = probe_workdir(tmp_path)
    result = run_script(tmp_path, program_spec(["python", "probe.py"], workdir=str(workdir)))
    assert result.returncode == 0, result.stderr
    records = [parse_metric_line(line) for line in result.stdout.splitlines() if line.startswith("[METRIC]")]
    kinds = [record.kind for record in records if record is not None]
    assert kinds == ["start", "code", "workdir", "workdir"], result.stdout
    code, end = records[1], records[-1]
    assert isinstance(code, CodeRecord) and code.script is not None and code.script.name == "probe.py"
    # The probe program writes into its run's directory only: nothing in the workdir.
    assert isinstance(end, WorkdirRecord) and end.phase == "end" and end.files == [] and end.complete
