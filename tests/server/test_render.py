"""The batch script: a golden file per container runtime (the worker's, and a user's program with each launcher),
and bash and shellcheck find nothing wrong."""

from __future__ import annotations

import base64
import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from contract.records import LaunchRecord, parse_metric_line
from contract.spec import RunSpec
from server.profiles import BUILTIN_DIR, load_profile
from server.render import BatchJob, _here_document, _timed, render_script
from tests.factories import spec

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
EXAMPLE_PROFILES = Path(__file__).resolve().parents[2] / "examples" / "profiles"
UPDATE = os.environ.get("SCALELAB_UPDATE_GOLDEN") == "1"
RUN_DIR = Path("/shared/scalelab/runs/0123456789")


def job(profile: str, **changes) -> BatchJob:
    path = BUILTIN_DIR / "local.toml" if profile == "local" else EXAMPLE_PROFILES / f"{profile}.toml"
    loaded = load_profile(path)
    defaults = {
        "run_id": "0123456789",
        "run_dir": RUN_DIR,
        "time_limit": "1-00:00:00" if profile != "cscs" else "02:00:00",
        "profile": loaded,
        "partition": loaded.default_partition,
        "worker_python": Path("/opt/scalelab/venv/bin/python"),
    }
    return BatchJob(**{**defaults, **changes})


# One rendering per runtime (the `local` profile runs the nodes' own Python), and the launcher without Slurm.
JOBS = {
    "none": job("local"),
    "pyxis": job("pyxis", sbatch_options={"qos": "high", "constraint": "h100"}, exclusive=True),
    "cscs": job("cscs", sbatch_options={"account": "g34"}),
    "apptainer": job("apptainer"),
    "podman": job("podman"),
    "local": job("local", launcher="local", time_limit="00:10:00"),
}
# The same where jobs run as their users and make their run directories (`own-`), and an inference run's prompts.
JOBS |= {f"own-{name}": dataclasses.replace(batch, job_creates_dir=True) for name, batch in JOBS.items()}
JOBS["own-inference"] = dataclasses.replace(JOBS["own-local"], prompts="def main(\nclass Foo:\n  return 'x' $(y)\n")
INFERENCE = {"model": "gpt", "dataset": "text", "kind": "inference", "checkpoint": "/shared/scalelab/runs/trained"}
# An inference run submitted before its training run ended: its job waits for the training's job.
JOBS["inference-after"] = dataclasses.replace(JOBS["none"], after_job="4242")
# A fabric probe over two nodes, rendered like a training run: its worker command is `probe`.
JOBS["probe"] = JOBS["pyxis"]


# A user's program on each of them, with each launcher: `program-<runtime>` (srun) and `program-torchrun-<runtime>`.
PROGRAM = {
    "command": ["python", "train.py", "--epochs", "3"],
    "workdir": "/home/alice/proj",
    "env": {"OMP_NUM_THREADS": "1", "NCCL_DEBUG": "INFO"},
    "params": {"lr": 0.05, "optimizer": "adam w", "warmup": True},
}
PROGRAMS = {
    f"{own}program-{launcher}{runtime}": JOBS[f"{own}{runtime}"]
    for own in ("", "own-")
    for launcher in ("", "torchrun-")
    for runtime in ("none", "pyxis", "cscs", "apptainer", "podman", "local")
}
SCRIPTS = sorted([*JOBS, *PROGRAMS])


def rendered(name: str, **spec_fields) -> str:
    runtime = name.removeprefix("own-").removeprefix("program-").removeprefix("torchrun-")
    one_node = runtime in ("none", "podman", "local", "inference", "inference-after")  # these profiles have one node
    if name in PROGRAMS:
        launcher = "torchrun" if "torchrun-" in name else "srun"
        fields = {"kind": "program", "gpus": 8, "nodes": 1 if one_node else 2, "strategy": "fsdp", "seed": 7}
        program = {**PROGRAM, "launcher": launcher}
        return render_script(RunSpec.model_validate({**fields, "program": program, **spec_fields}), PROGRAMS[name])
    if name == "probe":
        return render_script(RunSpec(kind="probe", nodes=2, gpus=8, probe_seconds=10), JOBS[name])
    fields = {"gpus": 8, "nodes": 2, "global_batch_size": 256, "epochs": 3, **spec_fields}
    if one_node:
        fields.update(nodes=1)
    if name in ("own-inference", "inference-after"):
        fields.update(INFERENCE, gpus=1, global_batch_size=8)
    return render_script(spec(**fields), JOBS[name])


@pytest.mark.parametrize("name", SCRIPTS)
def test_matches_golden_file(name):
    golden = GOLDEN / f"job-{name}.sbatch"
    if UPDATE:
        golden.write_text(rendered(name))
    assert rendered(name) == golden.read_text(), "rerun with SCALELAB_UPDATE_GOLDEN=1 if the change is intended"


@pytest.mark.parametrize("name", SCRIPTS)
def test_bash_parses_it(name, tmp_path):
    script = tmp_path / "job.sbatch"
    script.write_text(rendered(name))
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", SCRIPTS)
def test_shellcheck_finds_nothing(name, tmp_path):
    if not shutil.which("shellcheck"):
        pytest.fail("shellcheck is not installed: scripts/test installs it (Debian package shellcheck)")
    script = tmp_path / "job.sbatch"
    script.write_text(rendered(name))
    result = subprocess.run(["shellcheck", "--severity=style", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_slurm_script_asks_for_the_spec_layout_on_the_profiles_partition():
    script = rendered("pyxis")
    expected = ["--nodes=2", "--ntasks-per-node=4", "--gres=gpu:4", "--cpus-per-task=16", "--time=1-00:00:00"]
    expected += ["--partition=gpu", "--account=ml-scaling", f"--output={RUN_DIR}/output.log", "--open-mode=append"]
    for line in expected:
        assert f"#SBATCH {line}\n" in script


def test_a_dependent_run_waits_for_a_job_id_only_and_ends_if_the_training_fails():
    script = rendered("inference-after")
    assert "#SBATCH --dependency=afterok:4242\n#SBATCH --kill-on-invalid-dep=yes\n" in script
    assert "--dependency" not in rendered("own-inference")
    array_task = dataclasses.replace(JOBS["inference-after"], after_job="4242_7")
    assert "#SBATCH --dependency=afterok:4242_7\n" in render_script(spec(**INFERENCE, gpus=1), array_task)
    for hostile in ("4242,afterany:1", "4242 --wrap=x", "x", "", "4242\n#SBATCH --uid=0", "-1"):
        with pytest.raises(ValueError, match="not a Slurm job id"):
            render_script(spec(**INFERENCE, gpus=1), dataclasses.replace(JOBS["inference-after"], after_job=hostile))


def test_an_exclusive_run_asks_for_whole_nodes():
    assert "#SBATCH --exclusive\n" in rendered("pyxis")
    assert "--exclusive" not in rendered("apptainer")


def test_cpu_partitions_ask_for_no_gres():
    assert "--gres" not in rendered("none")
    assert "nvidia.com/gpu" not in rendered("podman")


def test_the_worker_is_signalled_before_the_limit_and_the_job_requeued():
    script = rendered("pyxis")
    assert "#SBATCH --signal=USR1@120\n#SBATCH --requeue\n" in script
    requeue = '|| status=$?\nlaunch_record end "$status"\nif ((status == 75 && ${SLURM_RESTART_COUNT:-0} < 3)); then\n'
    assert requeue in script
    # With a short limit the signal comes in its second half, not before the job could start.
    assert "#SBATCH --signal=USR1@30\n" in render_script(spec(), job("pyxis", time_limit="00:01:00"))


def test_a_profile_without_signal_has_no_requeue():
    quiet = job("pyxis")
    quiet = dataclasses.replace(quiet, profile=quiet.profile.model_copy(update={"signal_before_end_s": 0}))
    script = render_script(spec(), quiet)
    assert "--signal" not in script and "--requeue" not in script and "scontrol requeue" not in script


def test_users_options_follow_and_replace_the_profiles():
    script = rendered("cscs")
    assert "#SBATCH --account=g34\n" in script
    pyxis = render_script(spec(), job("pyxis", sbatch_options={"account": "other"}))
    assert "--account=ml-scaling" not in pyxis and "#SBATCH --account=other\n" in pyxis


def test_profile_environment_is_quoted_and_exported():
    assert "export NCCL_NET='AWS Libfabric'\n" in rendered("cscs")
    assert "export NCCL_SOCKET_IFNAME=ib0\n" in rendered("pyxis")
    podman = rendered("podman")
    assert "'--env=SLURM_*'" in podman and "--env=MASTER_ADDR" in podman


def test_modules_load_before_nounset():
    script = rendered("apptainer")
    assert "set -eo pipefail\nmodule load apptainer/1.3\nset -u\n" in script


def test_local_script_enforces_the_time_limit():
    # Not exec'd: the script outlives the launcher to write the launch's end record.
    assert "\ntimeout 600 " in rendered("local")
    assert "--nproc-per-node=8" in rendered("local")


def test_paths_are_quoted_for_the_shell():
    odd = job("local", launcher="local", worker_python=Path("/opt/my venv/bin/python"), run_dir=Path("/r/x"))
    assert "'/opt/my venv/bin/python'" in render_script(spec(), odd)


def test_directive_values_outside_the_safe_alphabet_are_refused():
    with pytest.raises(ValueError, match="unsafe value for #SBATCH --mem"):
        render_script(spec(), job("local", sbatch_options={"mem": "4G\nrm -rf /"}))
    with pytest.raises(ValueError, match="unsafe value for #SBATCH --output"):
        render_script(spec(), job("local", run_dir=Path("/runs/a b")))


# ---- jobs that run as their users and make their own run directories -----------------------------------------


def test_a_job_that_makes_its_directory_writes_its_output_there_itself():
    script = rendered("own-pyxis")
    # The directory does not exist when slurmstepd opens the output; the script appends once it made it.
    assert "#SBATCH --output=/dev/null\n" in script and "--open-mode" not in script
    assert f"mkdir -p -- {RUN_DIR} || refuse" in script
    assert f"[[ -O {RUN_DIR} && ! -L {RUN_DIR} ]] || refuse" in script
    assert f"cd -- {RUN_DIR} || refuse" in script
    assert "exec >>output.log 2>&1 || refuse" in script
    assert script.index("umask 027\n") < script.index("mkdir -p") < script.index("exec >>output.log")
    # Output reaches output.log before anything else runs; the spec comes before the launch.
    assert script.index("exec >>output.log") < script.index("set -euo pipefail") < script.index("SCALELAB_SPEC")
    assert script.index("mv -f -- .spec.json.partial spec.json") < script.index("srun --kill-on-bad-exit")
    assert "export MASTER_ADDR" in script  # launched as before


def test_module_loads_are_logged_once_the_directory_is_made():
    script = rendered("own-apptainer")
    assert script.index("exec >>output.log") < script.index("module load apptainer/1.3")


def test_the_spec_is_one_line_in_a_quoted_here_document():
    script = rendered("own-none")
    body = script.split("<<'SCALELAB_SPEC'\n", 1)[1].split("\nSCALELAB_SPEC\n", 1)[0]
    assert "\n" not in body
    assert RunSpec.model_validate_json(body) == spec(gpus=8, nodes=1, global_batch_size=256, epochs=3)


def test_inference_prompts_travel_as_base64():
    script = rendered("own-inference")
    body = script.split("base64 -d >.prompts.txt.partial <<'SCALELAB_PROMPTS'\n", 1)[1].split("\nSCALELAB_PROMPTS")[0]
    assert base64.b64decode(body.replace("\n", "")).decode() == JOBS["own-inference"].prompts
    assert "mv -f -- .prompts.txt.partial prompts.txt" in script
    # Without the mode, the server writes the prompts file: the script carries nothing.
    assert "SCALELAB_PROMPTS" not in render_script(spec(), dataclasses.replace(JOBS["local"], prompts="x\n"))


def test_a_here_document_refuses_a_body_that_holds_its_delimiter():
    with pytest.raises(ValueError, match="delimiter SCALELAB_SPEC occurs"):
        _here_document("cat", "SCALELAB_SPEC", "{}\nSCALELAB_SPEC\ntouch x")
    assert _here_document("cat", "SCALELAB_SPEC", '{"a":"SCALELAB_SPEC"}')[1] == '{"a":"SCALELAB_SPEC"}'


def test_an_unsafe_run_directory_is_refused_without_a_directive_naming_it():
    with pytest.raises(ValueError, match="unsafe run directory"):
        render_script(spec(), job("pyxis", run_dir=Path("/runs/a,b:c"), job_creates_dir=True))
    with pytest.raises(ValueError, match="unsafe run directory"):
        render_script(spec(), job("pyxis", run_dir=Path("runs/relative"), job_creates_dir=True))


def _launch_tail(script: str, command: str) -> str:
    """The script's launch-record function and its timed launch, `command` in the launcher's place."""
    clock = script[script.index("launch_record() {") : script.index("\n}\n") + 3]
    return "set -euo pipefail\n" + clock + "\n".join(_timed(command)) + "\n"


@pytest.mark.parametrize("name", ["none", "program-none", "local", "program-torchrun-local"])
@pytest.mark.parametrize(("command", "status"), [("printf 'no newline at the end'", 0), ("exit 7", 7)])
def test_each_launch_is_timed_by_records_of_its_own_whatever_its_end(name, command, status, tmp_path):
    """Run by bash: a start and an end record around the launch, each a whole line the parser reads back, the end
    written and the launcher's status kept when the program fails; a restart count that is not a number is 0."""
    script = tmp_path / "tail.sh"
    script.write_text(_launch_tail(rendered(name), f"( {command} )"))
    env = {"PATH": os.environ["PATH"], "SLURM_RESTART_COUNT": "2"}
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == status
    records = [parse_metric_line(line) for line in done.stdout.splitlines()]
    launches = [record for record in records if isinstance(record, LaunchRecord)]
    assert [(r.event, r.attempt, r.exit_status) for r in launches] == [("start", 2, None), ("end", 2, status)]
    assert launches[0].at <= launches[1].at
    if status == 0:
        assert "no newline at the end\n" in done.stdout  # the end record did not join the program's last line
    odd = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env={**env, "SLURM_RESTART_COUNT": "1;x"}, timeout=30
    )
    read = [parse_metric_line(line) for line in odd.stdout.splitlines()]
    assert {record.attempt for record in read if isinstance(record, LaunchRecord)} == {0}


def test_the_end_of_the_launch_comes_before_a_requeue_and_the_exit():
    script = rendered("pyxis")
    assert script.index("launch_record start\n") < script.index("srun ") < script.index('launch_record end "$status"')
    assert (
        script.index('launch_record end "$status"') < script.index("scontrol requeue") < script.index('exit "$status"')
    )
