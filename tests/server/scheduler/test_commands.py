"""Running Slurm's commands and reading their rows: a command that is not there says what is missing."""

from __future__ import annotations

import pytest

from server.scheduler import SchedulerError
from server.scheduler.commands import jobs_by_name, run_command


def test_missing_slurm_commands_are_explained():
    with pytest.raises(SchedulerError, match="scalelab-no-such-sbatch is not on PATH: is Slurm installed"):
        run_command(["scalelab-no-such-sbatch", "--parsable"])


def test_the_jobs_of_the_asked_names_are_read_from_name_and_id_rows():
    output = "scalelab-r1|11\nscalelab-r2|12\nscalelab-r1|21\nscalelab-r3|13\nwrap|14\nscalelab-r2|\n"
    names = {"scalelab-r1", "scalelab-r2"}
    assert jobs_by_name(output, names) == {"scalelab-r1": "21", "scalelab-r2": "12"}  # a later row wins; no id, no job


def test_an_arrays_rows_give_the_arrays_id():
    """squeue's %F prints the array's id on each task's row; sacct's JobID, the task (`500_1`) or the tasks that never
    started, folded. Anything else in the id column is no job of the name."""
    output = "a|500_[2-15%2]\nb|600_1\nc|700\nd|800_x\ne|9+0\nf|x1\n"
    assert jobs_by_name(output, set("abcdef")) == {"a": "500", "b": "600", "c": "700"}
