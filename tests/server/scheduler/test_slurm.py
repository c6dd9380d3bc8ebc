"""The Slurm scheduler against the real local Slurm: submit, poll in one call, cancel, refusals."""

from __future__ import annotations

import subprocess

import pytest

from contract.states import RunState
from server.scheduler import SchedulerError, SchedulerUnavailable
from server.scheduler.slurm import SlurmScheduler, run_command
from tests.factories import batch_script, wait_final

pytestmark = pytest.mark.slurm


def test_one_poll_follows_many_jobs_to_their_ends(slurm, tmp_path):
    scheduler = SlurmScheduler()
    done = scheduler.submit(batch_script(tmp_path, "srun true", tasks=2), tmp_path)
    failed = scheduler.submit(batch_script(tmp_path, "exit 3"), tmp_path)
    assert done.isdigit() and failed.isdigit()
    statuses = wait_final(scheduler, [done, failed])
    assert (statuses[done].state, statuses[done].exit_code) == (RunState.completed, "0:0")
    assert (statuses[failed].state, statuses[failed].exit_code) == (RunState.failed, "3:0")
    assert (tmp_path / "out.log").exists()  # --chdir put the output in the run directory


def test_cancelled_job(slurm, tmp_path):
    scheduler = SlurmScheduler()
    job = scheduler.submit(batch_script(tmp_path, "sleep 120"), tmp_path)
    scheduler.cancel(job)
    assert wait_final(scheduler, [job])[job].state is RunState.cancelled


def test_slurm_refuses_a_job_larger_than_the_cluster(slurm, tmp_path):
    with pytest.raises(SchedulerError, match=r"sbatch refused the job: .*More processors requested than permitted"):
        SlurmScheduler().submit(batch_script(tmp_path, "true", tasks=64), tmp_path)


def test_unknown_job_ids_are_left_out(slurm):
    assert SlurmScheduler().poll(["999999"]) == {}
    assert SlurmScheduler().poll([]) == {}


def test_missing_slurm_commands_are_explained():
    with pytest.raises(SchedulerError, match="scalelab-no-such-sbatch is not on PATH: is Slurm installed"):
        run_command(["scalelab-no-such-sbatch", "--parsable"])


def test_an_unreachable_accounting_database_is_unavailability():
    def sacct_down(argv):
        if argv[0] == "squeue":
            return subprocess.CompletedProcess(argv, 0, "", "")
        return subprocess.CompletedProcess(
            argv, 1, "", "sacct: error: Problem talking to the database: Connection refused"
        )

    with pytest.raises(SchedulerUnavailable, match=r"Slurm cannot be reached \(sacct: .*Connection refused"):
        SlurmScheduler(run=sacct_down).poll(["12"])
