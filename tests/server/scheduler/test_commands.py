"""Running Slurm's commands: a command that is not there says what is missing."""

from __future__ import annotations

import pytest

from server.scheduler import SchedulerError
from server.scheduler.commands import run_command


def test_missing_slurm_commands_are_explained():
    with pytest.raises(SchedulerError, match="scalelab-no-such-sbatch is not on PATH: is Slurm installed"):
        run_command(["scalelab-no-such-sbatch", "--parsable"])
