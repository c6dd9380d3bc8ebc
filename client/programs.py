"""`scalelab program`: run your own training program, swept over GPUs and its parameters, without writing a file.

The options build the request POST /api/experiments takes for a program (base.kind "program" with its command,
workdir, launcher, env, image and fixed parameters; the grid's gpus and params.NAME), which is then previewed or
submitted exactly as `scalelab submit` does.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from typing import Any

from client.api import Client
from client.command import Command, UsageError
from client.experiments import submission_options, submit_request
from client.inputs import listed
from contract.program import ENV_NAME, PARAM_NAME, PARAM_PREFIX, PYTHON_WORD, Launcher, ParamsStyle, ProgramCwd
from contract.spec import Strategy

NAME_LENGTH = 200  # an experiment's name, at most (ExperimentBase.name)


def _name_value(text: str, what: str, pattern: str, example: str, rule: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"{text!r}: give {what}, e.g. {example}")
    if not re.fullmatch(pattern, name):
        raise argparse.ArgumentTypeError(f"{name!r} is not a {rule}")
    return name, value


def param(text: str) -> tuple[str, list[Any]]:
    """An argument type: NAME=V1,V2,... with each value as JSON if it reads as JSON (0.1, 3, true), else text."""
    name, values = _name_value(
        text,
        "NAME=VALUE or NAME=V1,V2 to sweep",
        PARAM_NAME,
        "--param lr=0.05,0.1",
        "parameter name: lower-case letters, digits and _, starting with a letter, at most 40",
    )
    parsed = listed(values, text)
    if len({repr(value) for value in parsed}) < len(parsed):
        raise argparse.ArgumentTypeError(f"{text!r}: a value is listed twice")
    return name, parsed


def env_var(text: str) -> tuple[str, str]:
    """An argument type: NAME=VALUE, the value as it is (commas and spaces included)."""
    rule = "variable name: letters, digits and _, not first a digit"
    return _name_value(text, "NAME=VALUE", ENV_NAME, "--env OMP_NUM_THREADS=1", rule)


def gpu_counts(text: str) -> list[int]:
    """An argument type: 1 or 1,2,4."""
    try:
        counts = [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give GPU counts separated by commas, e.g. 1,2,4") from None
    if any(count < 1 for count in counts) or len(set(counts)) < len(counts):
        raise argparse.ArgumentTypeError(f"{text!r}: GPU counts are 1 or more, each listed once")
    return counts


def workdir_given(workdir: str, cwd: str) -> str:
    """The --workdir as an absolute path: `~` is the user's home (a shell leaves `--workdir=~/proj` as it is), and a
    relative path is taken from the directory the command runs in, where the user means it; the server refuses a
    relative one."""
    return os.path.abspath(os.path.join(cwd, os.path.expanduser(workdir)))


def program_request(args: argparse.Namespace, cwd: str) -> dict[str, Any]:
    """The experiment request the options describe. A value swept (several given) goes to the grid, one to base."""
    command: list[str] = args.command
    if not command:
        raise UsageError("give the program's command after --, e.g. scalelab program -- python train.py")
    program: dict[str, Any] = {
        "command": command,
        "workdir": workdir_given(args.workdir, cwd),
        "launcher": args.launcher,
    }
    if args.params_style != ParamsStyle.flags:
        program["params_style"] = args.params_style
    if args.cwd != ProgramCwd.workdir.value:
        program["cwd"] = args.cwd
    if args.image:
        program["image"] = args.image
    env: dict[str, str] = {}
    for name, value in args.env:
        if name in env:
            raise UsageError(f"--env {name} is given twice")
        env[name] = value
    if env:
        program["env"] = env
    base: dict[str, Any] = {"kind": "program", "program": program}
    grid: dict[str, list[Any]] = {}
    for name, values in args.param:
        if name in program.get("params", {}) or PARAM_PREFIX + name in grid:
            raise UsageError(f"--param {name} is given twice")
        if len(values) == 1:
            program.setdefault("params", {})[name] = values[0]
        else:
            grid[PARAM_PREFIX + name] = values
    if args.strategy:
        base["strategy"] = args.strategy
    if args.gpus and len(args.gpus) == 1:
        base["gpus"] = args.gpus[0]
    elif args.gpus:
        grid["gpus"] = args.gpus
    resources: dict[str, Any] = {}
    for key in ("profile", "nodes", "time_limit"):
        if getattr(args, key) is not None:
            resources[key] = getattr(args, key)
    name = args.name or shlex.join(command)
    return {"name": name[:NAME_LENGTH], "base": base, "grid": grid, "resources": resources}


def run_program(client: Client, args: argparse.Namespace) -> int:
    return submit_request(client, program_request(args, os.getcwd()), args)


def _program_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--name", help="the experiment's name (default: the command)")
    sub.add_argument(
        "--workdir",
        default=".",
        metavar="DIR",
        help="where the program starts, on the shared file system under one of the profile's program roots "
        "(default: this directory; a relative one is taken from this directory, ~ is your home)",
    )
    sub.add_argument(
        "--cwd",
        choices=list(ProgramCwd),
        default=ProgramCwd.workdir.value,
        help="where each run starts: workdir (shared by every run: a file one run writes there, a later run finds) "
        "or run_dir (its own run directory; the file the command names is still found in the workdir) "
        "(default: %(default)s)",
    )
    sub.add_argument(
        "--launcher",
        choices=list(Launcher),
        default=Launcher.srun.value,
        help="srun: one task per GPU with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set; "
        "torchrun: one torchrun per node starting a process per GPU (default: %(default)s)",
    )
    sub.add_argument(
        "--gpus", type=gpu_counts, metavar="N[,N...]", help="processes in all; several sweep them (default: 1)"
    )
    sub.add_argument("--nodes", type=int, metavar="N", help="Slurm nodes for each run (default: 1)")
    sub.add_argument(
        "--strategy",
        choices=list(Strategy),
        metavar="LABEL",
        help="a label the program reads from SCALELAB_STRATEGY, which names its series on the dashboard: "
        + ", ".join(Strategy)
        + " (default: ddp)",
    )
    sub.add_argument(
        "--param",
        type=param,
        action="append",
        default=[],
        metavar="NAME=V[,V...]",
        help="a parameter, passed as --NAME VALUE after the command and as SCALELAB_PARAM_NAME; several values "
        "sweep it, one run each (repeat for several parameters)",
    )
    sub.add_argument(
        "--params-style",
        choices=list(ParamsStyle),
        default=ParamsStyle.flags.value,
        help="flags: each parameter as --NAME VALUE after the command and as SCALELAB_PARAM_NAME; env: only as "
        "SCALELAB_PARAM_NAME, for a script whose argument parser refuses flags it does not know "
        "(default: %(default)s)",
    )
    sub.add_argument(
        "--env",
        type=env_var,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for every task (repeat for several); the launch's own (RANK, SLURM_*, "
        "SCALELAB_*, ...) are refused",
    )
    sub.add_argument("--image", metavar="REF", help="a container image instead of the profile's, where it takes one")
    sub.add_argument("--profile", help="the cluster profile (default: the server's)")
    sub.add_argument("--time-limit", metavar="[D-]HH:MM:SS", help="Slurm's wall-time limit per run (default: 00:10:00)")
    submission_options(sub)
    sub.add_argument(
        "command",
        nargs="*",
        metavar="-- COMMAND",
        help=f"the program and its arguments, after --; '{PYTHON_WORD}' as the first word is the profile's Python",
    )


COMMANDS = (
    Command(
        "program",
        run_program,
        "Run your own training program, swept over GPUs and its parameters",
        "Builds the experiment request of a program run from the options (see `scalelab submit` for a file) and "
        "submits it, or with --dry-run prints its runs and a batch script. The program is launched like scalelab's "
        "own worker and reports its figures by printing [METRIC] lines (contract/metrics.py prints them for a "
        "Python program); it reads its parameters as --NAME VALUE arguments or SCALELAB_PARAM_NAME. Everything "
        "after -- is the command, one word per argument as your shell split it; it is never run by a shell. "
        "Options the server refuses (a workdir outside the profile's program roots, a script that is not in it, "
        "a command given as one word with spaces, a variable the launch sets) are exit 2 with the field named.",
        _program_arguments,
        (
            "scalelab program --gpus 1,2,4 -- python train.py --epochs 3",
            "scalelab program --launcher torchrun --param lr=0.05,0.1 --gpus 1,2 --dry-run -- python train.py",
            "scalelab program --workdir ~/proj --env OMP_NUM_THREADS=1 --strategy fsdp -- python -m mypkg.train",
            'EXP=$(scalelab program -q --gpus 1,2 -- ./train.sh) && scalelab watch "$EXP"',
        ),
    ),
)
