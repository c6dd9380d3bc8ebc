"""Where a program may run: "~" as a program root is the home of the Unix account its jobs run as."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from server.models import ExperimentCreate
from server.profiles import load_catalog
from server.services.planning import PlanError, home_of, plan_experiment

ME = pwd.getpwuid(os.getuid())


def test_jobs_run_as_their_users_from_their_own_home():
    assert home_of(ME.pw_name, runs_as_user=True) == Path(ME.pw_dir)
    assert home_of("no-such-account-here", runs_as_user=True) is None


def test_jobs_run_as_the_service_from_its_home_whoever_asks():
    assert home_of("no-such-account-here", runs_as_user=False) == Path(ME.pw_dir)


def test_without_a_home_the_user_is_told_why_no_root_takes_the_workdir():
    request = ExperimentCreate.model_validate(
        {
            "name": "p",
            # A command found on the PATH: the home holds no script to look for, and the test writes none there.
            "base": {"kind": "program", "program": {"command": ["hostname"], "workdir": ME.pw_dir}},
        }
    )
    catalog = load_catalog(None, "local")
    with pytest.raises(PlanError) as raised:
        plan_experiment(request, catalog.profiles, "local", slurm=True, home=None)
    ((loc, message),) = [(tuple(error["loc"]), error["msg"]) for error in raised.value.errors]
    assert loc == ("body", "base", "program", "workdir")
    assert message.endswith(
        "(none), with links followed; and the account the job would run as has no home here: put the program under "
        "one, or have the server's operator add its directory to SCALELAB_PROGRAM_ROOTS"
    )
    assert plan_experiment(request, catalog.profiles, "local", slurm=True, home=Path(ME.pw_dir)).specs
