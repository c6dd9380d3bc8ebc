"""A run's job name and the run a job name tells, without a cluster."""

from __future__ import annotations

import pytest

from server.scheduler.naming import job_name, run_id_of


def test_a_runs_job_is_named_after_it_and_the_name_tells_the_run_back():
    assert job_name("0a1b2c3d4e") == "scalelab-0a1b2c3d4e"
    assert run_id_of(job_name("0a1b2c3d4e")) == "0a1b2c3d4e"


@pytest.mark.parametrize("name", [None, "", "scalelab-", "wrap", "my-scalelab-0a1b", "0a1b2c3d4e"])
def test_a_name_scalelab_did_not_give_tells_no_run(name):
    assert run_id_of(name) is None
