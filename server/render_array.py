"""The batch script of a Slurm job array: one task per run, each task starting its run's own batch script.

A run's own script (server/render.py) stays what it is and where it is: resubmitting the run alone submits it as a
job of its own. The array's script holds only what the runs share (their #SBATCH lines, which must be equal but
for the run's name and output) and a table from the task's index to its run's id and directory; everything in the
table is quoted as render.py quotes every value. `tasks_in` reads the table back: which task of a submitted array
each run is, for a server that restarted before it recorded them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contract.rundir import OUTPUT_FILE, SCRIPT_FILE
from server.render import _quote

# The #SBATCH options that name one run (its job's name, its output file and how it opens it): the array's script
# sets its own; every other option must be the same in each run's script for the runs to share an array.
PER_RUN_OPTIONS = ("job-name", "output", "open-mode")
# Options a run's script must not hold to go into an array: an array of its own would be nested.
_NOT_IN_ARRAYS = ("array",)
_DIRECTIVE = "#SBATCH --"


@dataclass(frozen=True)
class ArrayTask:
    """One task of the array: the run it is, and where its directory and script are."""

    run_id: str
    run_dir: Path


def _option(line: str) -> str | None:
    """The option a #SBATCH line sets (`nodes` of `#SBATCH --nodes=2`); None for any other line."""
    if not line.startswith(_DIRECTIVE):
        return None
    return line.removeprefix(_DIRECTIVE).split("=", 1)[0]


def shared_directives(script: str) -> tuple[str, ...] | None:
    """The #SBATCH lines of a run's script that do not name the run, in order: runs whose lines are equal may share
    an array. None for a script that cannot go into one."""
    shared = []
    for line in script.splitlines():
        option = _option(line)
        if option is None:
            continue
        if option in _NOT_IN_ARRAYS:
            return None
        if option not in PER_RUN_OPTIONS:
            shared.append(line)
    return tuple(shared)


def array_range(count: int, throttle: int | None) -> str:
    """`--array`'s value: task indices 0 to count - 1, at most `throttle` of them running at once."""
    if count < 1:
        raise ValueError("an array needs at least one task")
    if throttle is not None and throttle < 1:
        raise ValueError(f"an array's throttle must be at least 1, not {throttle}")
    return f"0-{count - 1}" + (f"%{throttle}" if throttle is not None else "")


def render_array_script(
    name: str, directives: Sequence[str], tasks: Sequence[ArrayTask], throttle: int | None, header: str
) -> str:
    """The array's script: `directives` (the runs' shared #SBATCH lines), its own name and range, and the table
    that starts task i's run. `header` says, in a comment, what the array is."""
    if not tasks:
        raise ValueError("an array needs at least one task")
    for line in directives:
        if _option(line) in (*PER_RUN_OPTIONS, *_NOT_IN_ARRAYS):
            raise ValueError(f"an array's shared directives name one run: {line!r}")
    if "\n" in header:
        raise ValueError("the header is one line")
    table = []
    for index, task in enumerate(tasks):
        run_dir = str(task.run_dir)
        if not task.run_dir.is_absolute() or "\n" in run_dir:
            raise ValueError(f"unsafe run directory: {run_dir!r}")
        table.append(f"{_ROW_INDENT}{index}) run_id={_quote(task.run_id)}; run_dir={_quote(run_dir)} ;;")
    lines = [
        "#!/bin/bash",
        f"# {header}: rendered by scalelab; each task is a run of its own, started by its own batch script.",
        f"#SBATCH --job-name={name}" if _safe_name(name) else _refuse(name),
        *directives,
        # Each task writes its run's output.log itself (below): Slurm's own output file would be the array's.
        "#SBATCH --output=/dev/null",
        f"#SBATCH --array={array_range(len(tasks), throttle)}",
        "set -euo pipefail",
        "# The run this task is, by the task's index.",
        'case "${SLURM_ARRAY_TASK_ID:-}" in',
        *table,
        "    *)",
        "        echo \"scalelab: array task '${SLURM_ARRAY_TASK_ID:-}' is none of this array's runs\" >&2",
        "        exit 1",
        "        ;;",
        "esac",
        "# As a job of the run's own would: its output appended to the run's output.log (a requeued task appends",
        "# again), in the run's directory, running the run's own script (its #SBATCH lines are comments to bash).",
        f'exec >>"$run_dir"/{_quote(OUTPUT_FILE)} 2>&1',
        'cd -- "$run_dir"',
        'echo "scalelab: run $run_id is task ${SLURM_ARRAY_TASK_ID} of array job ${SLURM_ARRAY_JOB_ID:-}"',
        f'exec bash -- "$run_dir"/{_quote(SCRIPT_FILE)}',
    ]
    return "\n".join(lines) + "\n"


_ROW_INDENT = "    "
# A row of the table as render_array_script writes it: the task's index and its run's id, quoted.
_ROW = re.compile(rf"^{_ROW_INDENT}([0-9]+)\) run_id=(\S+); run_dir=")


def tasks_in(script: str) -> dict[str, int]:
    """The runs an array's script (render_array_script's) starts, by run id, each with its task's index; empty for
    a script whose table is not one this module wrote (indices 0, 1, 2... in order, each run once)."""
    tasks: dict[str, int] = {}
    for line in script.splitlines():
        row = _ROW.match(line)
        if row is None:
            continue
        run_id = _unquoted(row[2])
        if int(row[1]) != len(tasks) or run_id is None or run_id in tasks:
            return {}
        tasks[run_id] = len(tasks)
    return tasks


def _unquoted(word: str) -> str | None:
    """The value `_quote` made `word` of; None for a word it would not have written."""
    try:
        words = shlex.split(word)
    except ValueError:  # an unbalanced quote
        return None
    return words[0] if len(words) == 1 and _quote(words[0]) == word else None


def _safe_name(name: str) -> bool:
    return bool(name) and all(char.isalnum() or char in "-_." for char in name)


def _refuse(name: str) -> str:
    raise ValueError(f"unsafe array job name: {name!r}")
