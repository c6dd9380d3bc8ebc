"""Running Slurm's commands and reading their rows: a command that is not there says what is missing."""

from __future__ import annotations

import pytest

from server.scheduler import SchedulerError
from server.scheduler.commands import jobs_by_run, run_command


def test_missing_slurm_commands_are_explained():
    with pytest.raises(SchedulerError, match="scalelab-no-such-sbatch is not on PATH: is Slurm installed"):
        run_command(["scalelab-no-such-sbatch", "--parsable"])


def test_the_jobs_of_the_asked_runs_are_read_from_name_and_id_rows():
    output = "scalelab-r1|11\nscalelab-r2|12\nscalelab-r1|21\nscalelab-r3|13\nwrap|14\nscalelab-r2|\n"
    assert jobs_by_run(output, ["r1", "r2"]) == {"r1": "21", "r2": "12"}  # a later row wins; no id, no job
