"""A user's own training program as a run: its command, where it runs, how its processes start, and its parameters.

The program is launched the way scalelab launches its own worker (one task per GPU under srun, or torchrun on each
node) and tells the server its figures through the same `[METRIC]` lines (contract.metrics prints them for a Python
program). Everything here goes into a batch script: names are kept to plain alphabets and values are quoted there.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

# A parameter's name becomes `--NAME` on the command line and SCALELAB_PARAM_<NAME> in the environment.
PARAM_NAME = r"^[a-z][a-z0-9_]{0,39}$"
PARAM_PREFIX = "params."  # a grid sweeps a parameter under this prefix: "params.lr": [0.1, 0.01]
PARAM_ENV_PREFIX = "SCALELAB_PARAM_"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
# Directories go into srun and runtime options, where ',' and ':' split mounts: the run directory's alphabet.
WORKDIR = r"^/[A-Za-z0-9_./+@-]{0,1023}$"
# `python` as the command's first word means the profile's Python (the worker's, or the image's).
PYTHON_WORD = "python"

# Variables the launch sets for every task, which a program's env must not replace: Slurm's own (srun reads
# SLURM_* and SRUN_*, sbatch SBATCH_*), torch.distributed's rendezvous, and scalelab's own.
RESERVED_ENV = frozenset(
    {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
     "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED"}
)  # fmt: skip
RESERVED_ENV_PREFIXES = ("SLURM_", "SLURMD_", "SRUN_", "SBATCH_", "SALLOC_", "SCALELAB_", "TORCHELASTIC_", "PMI_")


class Launcher(StrEnum):
    srun = "srun"  # one task per GPU, each running the command with RANK, LOCAL_RANK, WORLD_SIZE set from Slurm
    torchrun = "torchrun"  # one task per node, running torchrun, which starts a process per GPU


def reserved_env(name: str) -> bool:
    """Whether a variable is one the launch sets itself."""
    return name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES)


def _no_control(text: str) -> str:
    # NUL cannot go into an argv or environment at all; other control characters are never meant.
    if any(ord(char) < 32 and char != "\t" for char in text):
        raise ValueError("must not hold control characters (newlines, NUL)")
    return text


Word = Annotated[str, StringConstraints(min_length=1, max_length=4096)]
EnvValue = Annotated[str, StringConstraints(max_length=4096)]
ParamValue = (
    Annotated[str, StringConstraints(min_length=1, max_length=256)]
    | Annotated[int, Field(ge=-(10**15), le=10**15)]
    | Annotated[float, Field(allow_inf_nan=False)]
    | bool
)


def param_text(value: str | int | float | bool) -> str:
    """A parameter's value as its program reads it (`true`/`false` for booleans, as JSON writes them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def param_env(name: str) -> str:
    """The environment variable that carries a parameter: SCALELAB_PARAM_LR for `lr`."""
    return PARAM_ENV_PREFIX + name.upper()


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
        pattern=WORKDIR,
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
    params: dict[Annotated[str, StringConstraints(pattern=PARAM_NAME)], ParamValue] = Field(
        default={},
        max_length=64,
        description="passed as `--NAME VALUE` after the command and as SCALELAB_PARAM_NAME; swept in the grid as "
        "params.NAME",
    )

    @field_validator("command")
    @classmethod
    def _command_words(cls, command: list[str]) -> list[str]:
        for word in command:
            _no_control(word)
        if command and command[0].startswith("-"):
            # The first word is what runs: a launcher (torchrun, a shell's exec) would read it as its own option.
            raise ValueError(f"the first word names the program to run, not an option: {command[0][:40]!r}")
        return command

    @field_validator("workdir")
    @classmethod
    def _workdir_plain(cls, workdir: str) -> str:
        parts = PurePosixPath(workdir).parts
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

    def arguments(self) -> list[str]:
        """The words after the command: `--NAME VALUE` for each parameter, in the order given."""
        words: list[str] = []
        for name, value in self.params.items():
            words += [f"--{name}", param_text(value)]
        return words

    def environment(self) -> dict[str, str]:
        """Every variable the program's tasks get besides the launch's: its env, then its parameters."""
        return {**self.env, **{param_env(name): param_text(value) for name, value in self.params.items()}}
