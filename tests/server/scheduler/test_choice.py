"""Which scheduler a server uses: pyslurm only where it matches the cluster, then Slurm's commands, then local."""

from __future__ import annotations

import shutil

import pytest

from server.scheduler.choice import SchedulerUnusable, make_scheduler
from server.scheduler.pyslurm_backend import pyslurm_usable


def test_auto_takes_slurms_commands_where_pyslurm_cannot_be_used(settings):
    usable, reason = pyslurm_usable()
    assert "pyslurm" in reason
    assert not usable, "pyslurm cannot be built against this machine's Slurm (see the README)"
    expected = "slurm" if shutil.which("sbatch") else "local"
    assert make_scheduler(settings.model_copy(update={"scheduler": "auto"})).name == expected


def test_asking_for_pyslurm_where_it_cannot_work_refuses_to_start_and_says_why(settings):
    with pytest.raises(SchedulerUnusable, match="SCALELAB_SCHEDULER=pyslurm, but pyslurm is not installed"):
        make_scheduler(settings.model_copy(update={"scheduler": "pyslurm"}))


def test_an_explicit_backend_is_used_as_asked(settings):
    assert make_scheduler(settings.model_copy(update={"scheduler": "local"})).name == "local"
    assert make_scheduler(settings.model_copy(update={"scheduler": "slurm"})).name == "slurm"
