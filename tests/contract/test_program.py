"""A user's program as a run: what ProgramSpec and a program RunSpec take, each refusal and what it says, and the
words and variables a program is given."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from contract.program import (
    SHELL_ENV,
    Launcher,
    ProgramCwd,
    ProgramSpec,
    env_refusals,
    named_file,
    param_env,
    param_text,
    reserved_env,
)
from contract.spec import PROGRAM_FIELDS, RunKind, RunSpec

WORKDIR = "/home/alice/proj"


def program(**fields: Any) -> dict[str, Any]:
    return {"command": ["python", "train.py"], "workdir": WORKDIR, **fields}


def refusal(fields: dict[str, Any]) -> tuple[tuple[str | int, ...], str]:
    """Where ProgramSpec refuses `fields`, and why (its only error)."""
    with pytest.raises(ValidationError) as caught:
        ProgramSpec.model_validate(fields)
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    return tuple(errors[0]["loc"]), errors[0]["msg"]


def test_a_plain_program_takes_the_defaults():
    spec = ProgramSpec.model_validate(program())
    assert (spec.launcher, spec.env, spec.params, spec.image) == (Launcher.srun, {}, {}, None)


@pytest.mark.parametrize(
    ("fields", "loc", "words"),
    [
        ({"command": []}, ("command",), "at least 1 item"),
        ({"command": ["python", ""]}, ("command", 1), "at least 1 character"),
        ({"command": ["python", "x" * 4097]}, ("command", 1), "at most 4096 characters"),
        ({"command": ["x"] * 257}, ("command",), "at most 256 items"),
        ({"command": ["python", "a\nb"]}, ("command",), "must not hold control characters"),
        ({"command": ["python", "a\x00b"]}, ("command",), "must not hold control characters"),
        ({"command": ["--standalone", "x"]}, ("command",), "the first word names the program to run, not an option"),
        ({"command": "python train.py"}, ("command",), "valid list"),  # an argv, never a shell string
        # Said in words, never as a regular expression.
        ({"workdir": "proj"}, ("workdir",), "must be an absolute path (starting with /), not 'proj'"),
        ({"workdir": "~/proj"}, ("workdir",), "must be an absolute path"),
        ({"workdir": "/home/a b"}, ("workdir",), "may hold only letters, digits and _ . / + @ -"),
        ({"workdir": "/home/a,b:/etc"}, ("workdir",), "not ',' ':'"),
        ({"workdir": "/" + "a" * 1024}, ("workdir",), "at most 1024 characters"),
        # A shell string given as one word: the argv it was meant as.
        ({"command": ["python train.py 5 10"]}, ("command",), 'did you mean ["python", "train.py", "5", "10"]?'),
        ({"command": ["python", "train.py -e 3"]}, ("command",), 'did you mean ["python", "train.py", "-e", "3"]?'),
        ({"command": ["bash run.sh 'a b'", "x"]}, ("command",), 'did you mean ["bash", "run.sh", "a b", "x"]?'),
        ({"params_style": "positional"}, ("params_style",), "'flags' or 'env'"),
        ({"workdir": "/home/alice/../bob"}, ("workdir",), "without '.', '..' or '//'"),
        ({"workdir": "/home/./alice"}, ("workdir",), "without '.', '..' or '//'"),
        ({"workdir": "/home//alice"}, ("workdir",), "without '.', '..' or '//'"),
        ({"launcher": "mpirun"}, ("launcher",), "'srun' or 'torchrun'"),
        ({"env": {"1X": "a"}}, ("env", "1X", "[key]"), "should match pattern"),
        ({"env": {"A-B": "a"}}, ("env", "A-B", "[key]"), "should match pattern"),
        ({"env": {"GREETING": "a\nb"}}, ("env",), "must not hold control characters"),
        ({"env": {"GREETING": "x" * 4097}}, ("env", "GREETING"), "at most 4096 characters"),
        ({"env": {f"V{n}": "x" for n in range(65)}}, ("env",), "at most 64 items"),
        ({"image": "my image"}, ("image",), "should match pattern"),
        ({"params": {"LR": 0.1}}, ("params", "LR", "[key]"), "should match pattern"),
        ({"params": {"1lr": 0.1}}, ("params", "1lr", "[key]"), "should match pattern"),
        ({"params": {"l" * 41: 0.1}}, ("params", "l" * 41, "[key]"), "should match pattern"),
        ({"params": {"tag": "a\nb"}}, ("params",), "must not hold control characters"),
        ({"shell": True}, ("shell",), "Extra inputs are not permitted"),
    ],
)
def test_each_refusal_names_its_field(fields, loc, words):
    where, why = refusal(program(**fields))
    assert where == loc
    assert words in why


@pytest.mark.parametrize("value", ["", "x" * 257, 10**15 + 1, -(10**15) - 1, math.nan, math.inf, None, [1]])
def test_a_parameter_is_a_short_string_a_bounded_number_or_a_boolean(value):
    with pytest.raises(ValidationError) as caught:
        ProgramSpec.model_validate(program(params={"lr": value}))
    assert all(error["loc"][:2] == ("params", "lr") for error in caught.value.errors())


@pytest.mark.parametrize(
    "names",
    [["RANK"], ["MASTER_PORT", "WORLD_SIZE"], ["SLURM_NTASKS"], ["SCALELAB_RUN_DIR"], ["SRUN_CPUS_PER_TASK"],
     ["CUDA_VISIBLE_DEVICES"], ["TORCHELASTIC_RUN_ID"], ["PYTHONUNBUFFERED"]],
)  # fmt: skip
def test_variables_the_launch_sets_are_refused_all_named(names):
    where, why = refusal(program(env={name: "1" for name in [*names, "OMP_NUM_THREADS"]}))
    assert where == ("env",)
    assert why.startswith(f"Value error, {', '.join(sorted(names))}: set by Slurm, torch.distributed's launch")
    assert all(reserved_env(name) for name in names) and not reserved_env("OMP_NUM_THREADS")


def test_a_workdir_loses_its_trailing_slash():
    assert ProgramSpec.model_validate(program(workdir="/home/alice/proj/")).workdir == WORKDIR
    assert ProgramSpec.model_validate(program(workdir="/")).workdir == "/"


def test_parameters_follow_the_command_and_go_into_the_environment_in_order():
    spec = ProgramSpec.model_validate(
        program(env={"OMP_NUM_THREADS": "2"}, params={"lr": 0.1, "warmup": True, "layers": 3, "tag": "a b"})
    )
    assert spec.arguments() == ["--lr", "0.1", "--warmup", "true", "--layers", "3", "--tag", "a b"]
    assert spec.environment() == {
        "OMP_NUM_THREADS": "2",
        "SCALELAB_PARAM_LR": "0.1",
        "SCALELAB_PARAM_WARMUP": "true",
        "SCALELAB_PARAM_LAYERS": "3",
        "SCALELAB_PARAM_TAG": "a b",
    }
    assert (param_text(False), param_text(1e-4), param_env("batch_size")) == (
        "false",
        "0.0001",
        "SCALELAB_PARAM_BATCH_SIZE",
    )


def test_params_style_env_passes_parameters_by_the_environment_alone():
    """For a script whose parse_args refuses flags it does not know: no word after the command, every variable."""
    spec = ProgramSpec.model_validate(program(params={"lr": 0.1, "layers": 3}, params_style="env"))
    assert spec.arguments() == []
    assert spec.environment() == {"SCALELAB_PARAM_LR": "0.1", "SCALELAB_PARAM_LAYERS": "3"}
    assert ProgramSpec.model_validate(program()).params_style == "flags"  # today's default, and stored runs'


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (["python", "train.py", "--x"], "train.py"),
        (["python", "sub/train.py"], "sub/train.py"),
        (["python", "-m", "pkg.train"], None),
        (["python", "-u", "train.py"], None),
        (["python"], None),
        (["./train.sh"], "./train.sh"),
        (["/opt/bin/train"], "/opt/bin/train"),
        (["torchrun", "train.py"], None),
    ],
)
def test_the_file_a_command_names_is_written_once(command, named):
    assert named_file(command) == named


@pytest.mark.parametrize(
    "command",
    [
        ["python", "train.py", "--name", "my run"],  # an argument's spaces are the argument's
        ["python", "my train.py"],  # a script whose name holds a space
        ["./my run.sh", "5"],  # a path that holds one
        ["python", "-c", "import sys; print(sys.argv)"],
    ],
)
def test_words_with_spaces_that_can_be_names_or_arguments_are_taken(command):
    assert ProgramSpec.model_validate(program(command=command)).command == command


def test_parameter_values_keep_their_json_type():
    params = ProgramSpec.model_validate(program(params={"a": True, "b": 3, "c": 0.5, "d": "3"})).params
    assert [type(value) for value in params.values()] == [bool, int, float, str]


# ---- a program in a run spec --------------------------------------------------------------------------------


def run_refusal(fields: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        RunSpec.model_validate(fields)
    return str(caught.value.errors()[0]["msg"])


def test_a_program_run_reads_only_its_own_fields():
    spec = RunSpec.model_validate({"kind": "program", "gpus": 4, "nodes": 2, "seed": 1, "program": program()})
    assert spec.kind is RunKind.program and spec.gpus_per_node == 2
    assert set(spec.settings()) == PROGRAM_FIELDS
    assert spec.settings()["program"]["command"] == ["python", "train.py"]
    assert RunSpec.model_validate_json(spec.model_dump_json()) == spec


def test_a_program_run_needs_its_program():
    assert "a run of kind 'program' needs its program: command and workdir" in run_refusal({"kind": "program"})


def test_a_program_belongs_to_program_runs_only():
    for kind in ("train", "inference"):
        why = run_refusal({"kind": kind, "program": program()})
        assert "program applies to runs of kind 'program' only" in why or "inference" in why


def test_the_built_in_workers_settings_are_refused_for_a_program_all_named():
    why = run_refusal({"kind": "program", "program": program(), "model": "gpt", "epochs": 3})
    assert "epochs, model: the built-in worker's settings do not apply to a program" in why
    assert "pass values to the program as program.params" in why


def test_processes_are_spread_evenly_over_the_nodes():
    why = run_refusal({"kind": "program", "gpus": 3, "nodes": 2, "program": program()})
    assert "gpus (3) must be a multiple of nodes (2)" in why


def test_a_program_runs_under_any_strategy_label():
    # The strategy is a label the program reads (SCALELAB_STRATEGY): no model decides which fit.
    spec = RunSpec.model_validate({"kind": "program", "strategy": "tp", "gpus": 3, "program": program()})
    assert spec.strategy == "tp"


def test_what_changes_the_batch_scripts_own_shell_or_loader_is_refused_with_its_reason():
    """Refused as a run is planned (a spec stored before stays readable), each name with why; a program's own
    variables, Python's included, stay."""
    assert env_refusals({"OMP_NUM_THREADS": "1", "PYTHONPATH": "src", "HF_TOKEN": "x", "LDFLAGS": "-g"}) == []
    for name, why in SHELL_ENV.items():
        assert env_refusals({name: "x"}) == [
            f"{name}: {why}, so it would change how the batch script itself runs; set it in a wrapper script that "
            "your command names"
        ]
    assert [refusal.split(":")[0] for refusal in env_refusals({"LD_PRELOAD": "a", "LD_BIND_NOW": "1", "IFS": ""})] == [
        "IFS",
        "LD_BIND_NOW",
        "LD_PRELOAD",
    ]
    assert ProgramSpec.model_validate(program(env={"LD_LIBRARY_PATH": "/opt/lib"})).env  # as a stored spec is read


def test_in_its_run_directory_the_file_the_command_names_is_still_the_workdirs():
    def program(command: list[str], cwd: str = "run_dir", **more: Any) -> ProgramSpec:
        return ProgramSpec.model_validate({"command": command, "workdir": "/home/a/proj/", "cwd": cwd, **more})

    assert ProgramSpec.model_validate({"command": ["python", "t.py"], "workdir": "/w"}).cwd == ProgramCwd.workdir
    assert program(["python", "train.py", "x.txt"]).started_command() == ["python", "/home/a/proj/train.py", "x.txt"]
    assert program(["./run.sh", "a"]).started_command() == ["/home/a/proj/run.sh", "a"]
    assert program(["python", "/opt/t.py"]).started_command() == ["python", "/opt/t.py"]
    assert program(["python", "-u", "t.py"]).started_command() == ["python", "-u", "t.py"]  # names no file it knows
    assert program(["hostname"]).started_command() == ["hostname"]  # found on PATH
    assert program(["python", "train.py"], cwd="workdir").started_command() == ["python", "train.py"]
    # A module is looked for where Python starts: refused unless PYTHONPATH says where it is.
    with pytest.raises(ValidationError, match="cwd run_dir with `python -m`"):
        program(["python", "-m", "pkg.train"])
    assert program(["python", "-m", "pkg.train"], env={"PYTHONPATH": "/home/a/proj"}).module_named()
