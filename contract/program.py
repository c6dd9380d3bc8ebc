"""A user's own training program as a run: its command, where it runs, how its processes start, and its parameters.

The program is launched the way scalelab launches its own worker (one task per GPU under srun, or torchrun on each
node) and tells the server its figures through the same `[METRIC]` lines (contract.metrics prints them for a Python
program). Everything here goes into a batch script: names are kept to plain alphabets and values are quoted there.
"""

from __future__ import annotations

import json
import shlex
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

# A parameter's name becomes `--NAME` on the command line and SCALELAB_PARAM_<NAME> in the environment.
PARAM_NAME = r"^[a-z][a-z0-9_]{0,39}$"
PARAM_PREFIX = "params."  # a grid sweeps a parameter under this prefix: "params.lr": [0.1, 0.01]
PARAM_ENV_PREFIX = "SCALELAB_PARAM_"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
# Directories go into srun and runtime options, where ',' and ':' split mounts: the run directory's alphabet.
WORKDIR = r"^/[A-Za-z0-9_./+@-]{0,1023}$"
_WORKDIR_ALPHABET = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./+@-")
_WORKDIR_LENGTH = 1024
# `python` as the command's first word means the profile's Python (the worker's, or the image's).
PYTHON_WORD = "python"

# Variables the launch sets for every task, which a program's env must not replace: Slurm's own (srun reads
# SLURM_* and SRUN_*, sbatch SBATCH_*), torch.distributed's rendezvous, and scalelab's own.
RESERVED_ENV = frozenset(
    {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
     "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED"}
)  # fmt: skip
RESERVED_ENV_PREFIXES = ("SLURM_", "SLURMD_", "SRUN_", "SBATCH_", "SALLOC_", "SCALELAB_", "TORCHELASTIC_", "PMI_")

# Variables that change how the batch script itself runs, not only the program: the env is exported in the script,
# so these would reach its own shell, the commands it runs (srun, timeout, the launcher's Python) and the dynamic
# loader of each. A program that needs one sets it itself, in a wrapper script its command names.
SHELL_ENV: dict[str, str] = {
    "BASH_ENV": "bash runs the file it names before any script it starts",
    "ENV": "sh, and bash in POSIX mode, run the file it names at start",
    "SHELLOPTS": "bash turns on the options it lists (xtrace, noglob...) at start",
    "BASHOPTS": "bash turns on the shopt options it lists at start",
    "POSIXLY_CORRECT": "bash switches to POSIX mode, and GNU tools parse their options otherwise",
    "IFS": "changes how the batch script splits words",
    "GLOBIGNORE": "changes which files the batch script's patterns match",
    "CDPATH": "changes where the batch script's `cd` goes",
    "PS4": "bash expands it, commands included, before each traced line",
    "BASH_XTRACEFD": "bash writes its trace to the file descriptor it names",
    "PROMPT_COMMAND": "bash runs it before each prompt",
    "PATH": "changes which srun, timeout and other commands the batch script runs",
    "GLIBC_TUNABLES": "the C library and dynamic loader of every command read it",
}
# The dynamic loader's own (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT...): it reads them in every command the script
# starts, srun and the launcher included.
SHELL_ENV_PREFIXES = {"LD_": "the dynamic loader reads it in every command the batch script starts"}
# PYTHONPATH, PYTHONSTARTUP and the like stay allowed: they reach only Python, and the only Python the script starts
# is the program (or the launcher that starts it), which is the user's to shape anyway.
# What a share recipient sees in place of an env value (server/services/secrets.py): never taken as a value, so that
# a request copied from what was shown cannot run with it.
HIDDEN_VALUE = "(hidden)"


class ParamsStyle(StrEnum):
    flags = "flags"  # `--NAME VALUE` after the command, and SCALELAB_PARAM_NAME
    env = "env"  # SCALELAB_PARAM_NAME only: for a script whose argument parser refuses flags it does not know


class ProgramCwd(StrEnum):
    workdir = "workdir"  # the program starts in its workdir, which every run of it shares
    run_dir = "run_dir"  # it starts in its own run's directory; the command's file is found in the workdir


class Launcher(StrEnum):
    srun = "srun"  # one task per GPU, each running the command with RANK, LOCAL_RANK, WORLD_SIZE set from Slurm
    torchrun = "torchrun"  # one task per node, running torchrun, which starts a process per GPU


def reserved_env(name: str) -> bool:
    """Whether a variable is one the launch sets itself."""
    return name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES)


def env_refusals(env: dict[str, str]) -> list[str]:
    """Why a new run may not be given this env: a variable that changes how the batch script itself runs, or a
    value shown hidden. Checked when a run is planned, not as the spec is read: runs stored before a name was refused
    still load."""
    refusals = [
        f"{name}: {why}, so it would change how the batch script itself runs; set it in a wrapper script that your "
        "command names"
        for name in sorted(env)
        if (why := shell_env(name))
    ]
    refusals += [
        f"{name}: {HIDDEN_VALUE} stands for a value hidden from you (its owner's, perhaps a secret): give your own"
        for name, value in sorted(env.items())
        if value == HIDDEN_VALUE
    ]
    return refusals


def shell_env(name: str) -> str | None:
    """Why a variable may not be set, where it changes how the batch script's shell or loader behaves; else None."""
    prefix = next((prefix for prefix in SHELL_ENV_PREFIXES if name.startswith(prefix)), None)
    return SHELL_ENV.get(name) or (SHELL_ENV_PREFIXES[prefix] if prefix else None)


def _no_control(text: str) -> str:
    # NUL cannot go into an argv or environment at all; other control characters are never meant.
    if any(ord(char) < 32 and char != "\t" for char in text):
        raise ValueError("must not hold control characters (newlines, NUL)")
    return text


Word = Annotated[str, StringConstraints(min_length=1, max_length=4096)]
EnvValue = Annotated[str, StringConstraints(max_length=4096)]
# The float's bounds too: an int beyond the int's would otherwise be taken as a float.
_PARAM_BOUND = 10**15
ParamValue = (
    Annotated[str, StringConstraints(min_length=1, max_length=256)]
    | Annotated[int, Field(ge=-_PARAM_BOUND, le=_PARAM_BOUND)]
    | Annotated[float, Field(allow_inf_nan=False, ge=-_PARAM_BOUND, le=_PARAM_BOUND)]
    | bool
)


def named_file_at(command: list[str]) -> int | None:
    """Where a command names the file it runs, that can be looked for before it runs: the script after `python`
    (not an option nor `-m`'s module), or the first word where it is a path (with a '/'); None for a bare command
    name, which is looked up on the task's PATH. The one rule: the server checks the file at submission (where it
    sees the workdir), the batch script again on the node, and cwd run_dir makes it a path into the workdir."""
    if command[0] == PYTHON_WORD:
        return 1 if len(command) > 1 and not command[1].startswith("-") else None
    return 0 if "/" in command[0] else None


def named_file(command: list[str]) -> str | None:
    """The file a command names (see named_file_at), as written in it."""
    at = named_file_at(command)
    return None if at is None else command[at]


def _spaced_program(command: list[str]) -> str | None:
    """Where a command's program word is a shell string given as one word (`"python train.py 5 10"`, or the script
    `"train.py --epochs 3"` after `python`): the argv it was likely meant as, quoted as JSON; else None. Refused so
    that it fails here rather than after queueing (exit 127, or "No such file"). Only where the word cannot be a
    name: a bare command name never holds a space, nor does a script's name end before one with `.py`; a path with
    a space (`./my run.sh`) stays allowed."""
    at = 1 if command[0] == PYTHON_WORD and len(command) > 1 else 0
    word = command[at]
    if not any(char.isspace() for char in word):
        return None
    try:
        split = shlex.split(word)
    except ValueError:
        split = word.split()
    if not split or (at == 0 and "/" in split[0]) or (at == 1 and not split[0].endswith(".py")):
        return None
    return json.dumps([*command[:at], *split, *command[at + 1 :]])


def workdir_refusal(workdir: str) -> str | None:
    """Why a workdir cannot be taken, in words (never the pattern): relative, too long, or a character that srun's
    and the container runtimes' mount options would split on; None where it can."""
    if not workdir.startswith("/"):
        return f"must be an absolute path (starting with /), not {workdir[:80]!r}: give the directory in full"
    if len(workdir) > _WORKDIR_LENGTH:
        return f"must be at most {_WORKDIR_LENGTH} characters"
    odd = sorted(set(workdir) - _WORKDIR_ALPHABET)
    if odd:
        shown = " ".join(repr(char) for char in odd[:8])
        return (
            f"may hold only letters, digits and _ . / + @ - (srun and container mounts split paths on others), "
            f"not {shown}: move or link the program to such a path"
        )
    return None


def param_text(value: str | int | float | bool) -> str:
    """A parameter's value as its program reads it (`true`/`false` for booleans, as JSON writes them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def param_env(name: str) -> str:
    """The environment variable that carries a parameter: SCALELAB_PARAM_LR for `lr`."""
    return PARAM_ENV_PREFIX + name.upper()


class ProgramBatch(BaseModel):
    """The batch a program trains per step, as it declares it, so that scaling can say whether every run trains the
    same global batch: `per` says what the size counts (all processes together, or each process), and the size is
    given as a number or as the name of the parameter that holds it (one of the two)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    per: Literal["global", "process"] = Field(
        description="global: the samples per step over all processes, the same on every GPU count (strong "
        "scaling); process: each process's, so that the global batch grows with the processes"
    )
    size: int | None = Field(default=None, ge=1, le=1_048_576, description="the batch, where the program fixes it")
    param: Annotated[str, StringConstraints(pattern=PARAM_NAME)] | None = Field(
        default=None, description="the name of the program's parameter that holds the batch (params.NAME, swept or not)"
    )

    @model_validator(mode="after")
    def _one_size(self) -> ProgramBatch:
        if (self.size is None) == (self.param is None):
            raise ValueError("give the batch's size or the parameter that holds it (param), one of the two")
        return self

    def refusal(self, params: dict[str, str | int | float | bool]) -> str | None:
        """Why a run's params do not give this batch: the parameter named is missing or not a positive integer."""
        if self.param is None:
            return None
        value = params.get(self.param)
        if value is None:
            return f"program.batch.param names {self.param!r}, which is not among the program's params"
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"program.batch.param names {self.param!r}, whose value {value!r} is not a positive whole number"
        return None

    def global_batch(self, params: dict[str, str | int | float | bool], processes: int) -> int | None:
        """The samples per step over all processes, for a run of this many processes (None: its params lack it)."""
        value = self.size if self.param is None else params.get(self.param)
        if self.refusal(params) is not None or not isinstance(value, int):
            return None
        return value if self.per == "global" else value * processes


class ProgramSpec(BaseModel):
    """A user's own program: what to run, where, how its processes start, and the values it is given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[Word] = Field(
        min_length=1,
        max_length=256,
        description="the argv, never a shell string; 'python' as the first word is the profile's Python",
        examples=[["python", "train.py", "--epochs", "3"]],
    )
    workdir: str = Field(
        json_schema_extra={"pattern": WORKDIR},  # checked by workdir_refusal, which says why in words
        description="absolute directory on the shared file system, under one of the profile's program roots; "
        "the program starts there",
    )
    launcher: Launcher = Field(
        default=Launcher.srun,
        description="srun: one task per GPU with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set; "
        "torchrun: one task per node running torchrun --nproc-per-node, meeting at the first node",
    )
    env: dict[Annotated[str, StringConstraints(pattern=ENV_NAME)], EnvValue] = Field(
        default={}, max_length=64, description="more environment variables for every task"
    )
    image: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./:@#+-]{1,512}$")] | None = Field(
        default=None, description="a container image instead of the profile's, for runtimes that take one"
    )
    cwd: ProgramCwd = Field(
        default=ProgramCwd.workdir,
        description="where the program starts: workdir (shared by every run of it: a file one run writes there, "
        "a later run finds) or run_dir (the run's own directory; the file the command names is still found in "
        "the workdir)",
    )
    params: dict[Annotated[str, StringConstraints(pattern=PARAM_NAME)], ParamValue] = Field(
        default={},
        max_length=64,
        description="passed as `--NAME VALUE` after the command (params_style flags) and as SCALELAB_PARAM_NAME; "
        "swept in the grid as params.NAME",
    )
    params_style: ParamsStyle = Field(
        default=ParamsStyle.flags,
        description="flags: each parameter as `--NAME VALUE` after the command and in the environment; env: only "
        "as SCALELAB_PARAM_NAME, for a script whose argument parser refuses flags it does not know",
    )
    batch: ProgramBatch | None = Field(
        default=None,
        description="the batch the program trains per step, as it declares it: scaling says whether every run "
        "trains the same global batch only where it is declared",
        examples=[{"per": "global", "size": 256}, {"per": "process", "param": "batch_size"}],
        # Left out of a dump where undeclared, so that a program without one dumps as before the field was added:
        # its stored specs, spec.json and series keys stay what they were.
        exclude_if=lambda batch: batch is None,
    )

    @field_validator("command")
    @classmethod
    def _command_words(cls, command: list[str]) -> list[str]:
        for word in command:
            _no_control(word)
        if command and command[0].startswith("-"):
            # The first word is what runs: a launcher (torchrun, a shell's exec) would read it as its own option.
            raise ValueError(f"the first word names the program to run, not an option: {command[0][:40]!r}")
        if (meant := _spaced_program(command)) is not None:
            raise ValueError(f"one word per argument, never a shell string: did you mean {meant}?")
        return command

    @field_validator("workdir")
    @classmethod
    def _workdir_plain(cls, workdir: str) -> str:
        if (why := workdir_refusal(workdir)) is not None:
            raise ValueError(why)
        parts = workdir.split("/")  # not PurePosixPath's parts, which drop the '.' ones
        if ".." in parts or "." in parts or "//" in workdir:
            raise ValueError("must be a plain absolute path, without '.', '..' or '//'")
        return workdir.rstrip("/") or "/"

    @field_validator("env")
    @classmethod
    def _env_own(cls, env: dict[str, str]) -> dict[str, str]:
        reserved = sorted(name for name in env if reserved_env(name))
        if reserved:
            raise ValueError(
                f"{', '.join(reserved)}: set by Slurm, torch.distributed's launch or scalelab itself for every task"
            )
        for value in env.values():
            _no_control(value)
        return env

    @field_validator("params")
    @classmethod
    def _params_plain(cls, params: dict[str, str | int | float | bool]) -> dict[str, str | int | float | bool]:
        for value in params.values():
            if isinstance(value, str):
                _no_control(value)
        return params

    @model_validator(mode="after")
    def _module_found(self) -> ProgramSpec:
        if self.cwd == ProgramCwd.run_dir and self.module_named() and "PYTHONPATH" not in self.env:
            # Python looks for `-m`'s module in the directory it starts in, which would be the run's.
            raise ValueError(
                "cwd run_dir with `python -m`: Python would look for the module in the run's directory; name the "
                "script by its path, or set PYTHONPATH to the workdir in env"
            )
        return self

    def module_named(self) -> bool:
        """The command runs a module (`python -m NAME`)."""
        command = self.command
        return command[0] == PYTHON_WORD and len(command) > 2 and command[1] == "-m"

    def started_command(self) -> list[str]:
        """The command as it starts: with cwd run_dir, a relative file it names made a path into the workdir, so
        that `python train.py` still runs the workdir's train.py."""
        at = named_file_at(self.command)
        if self.cwd != ProgramCwd.run_dir or at is None or self.command[at].startswith("/"):
            return list(self.command)
        named = self.command[at].removeprefix("./")
        return [*self.command[:at], f"{self.workdir.rstrip('/')}/{named}", *self.command[at + 1 :]]

    def arguments(self) -> list[str]:
        """The words after the command: `--NAME VALUE` for each parameter, in the order given; none where the
        parameters go by the environment alone."""
        words: list[str] = []
        if self.params_style is ParamsStyle.env:
            return words
        for name, value in self.params.items():
            words += [f"--{name}", param_text(value)]
        return words

    def environment(self) -> dict[str, str]:
        """Every variable the program's tasks get besides the launch's: its env, then its parameters."""
        return {**self.env, **{param_env(name): param_text(value) for name, value in self.params.items()}}
