"""Real Slurm states made on demand on the two-node cluster, and what SlurmScheduler.poll makes of them.

The cluster is the one `scripts/slurm-local up --nodes 2` runs (see its --help): partitions debug (never
preempted), requeue and cancel (preempted by jobs of urgent), SlurmdTimeout=10 (30 on 24.11's containers, see
scripts/slurm-containers), memory enforced by task/cgroup. The jobs are small shell scripts. A job whose time
limit is one minute starts first and is checked last, so the minute or more that Slurm takes to end it runs
beside the other tests.

Slurm's own words, as poll returns them: squeue's for jobs in the queue (pending and running ones),
sacct's for jobs that left it; sacct records no reason for a job that ended ("None", so None here).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlmodel import Session

from contract.states import RunState
from server.runstate import apply_status
from server.scheduler import Job, JobStatus
from server.scheduler.slurm import SlurmScheduler
from tests import slurm_clusters
from tests.factories import experiment_row, run_row

pytestmark = pytest.mark.slurm


class Cluster:
    """The two-node cluster seen through SlurmScheduler and Slurm's own commands."""

    def __init__(self, env: dict[str, str], tmp_path: Path) -> None:
        self.env = env
        self.tmp_path = tmp_path
        self.scheduler = SlurmScheduler()
        self.jobs: list[str] = []
        # Job ids start again at 1 after `slurm-local down --nodes 2 --purge`, but slurmdbd keeps the old records.
        self.since = time.strftime("%Y-%m-%dT%H:%M:%S")
        nodes = self.run("sinfo", "-h", "-N", "-o", "%N").split()
        self.nodes = sorted(set(nodes))
        assert len(self.nodes) == 2, nodes

    def run(self, *argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=60, check=True).stdout

    def submit(self, *directives: str, body: str = "sleep 300") -> str:
        """A batch script with these #SBATCH directives, submitted as the server submits its runs."""
        script = self.tmp_path / f"job{len(self.jobs)}.sbatch"
        lines = ["#!/bin/bash", *(f"#SBATCH {directive}" for directive in directives), body]
        script.write_text("\n".join(lines) + "\n")
        job = self.scheduler.submit(script, self.tmp_path)
        self.jobs.append(job)
        return job

    def wait(self, job: str, until: Callable[[JobStatus], bool], timeout_s: float = 60) -> JobStatus:
        """Poll as the server's monitor does until `until` holds; fail with every status seen on the way."""
        seen: list[JobStatus | None] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.scheduler.poll([Job(job)]).get(Job(job))
            if not seen or seen[-1] != status:
                seen.append(status)
            if status is not None and until(status):
                return status
            time.sleep(0.3)
        raise AssertionError(f"job {job}: not there within {timeout_s} s; poll returned, in turn: {seen}")

    def running(self, job: str, output: Path) -> None:
        """The job runs and its script has started (so killing its node's slurmd cannot stop the launch)."""
        self.wait(job, lambda status: status.raw_state == "RUNNING")
        deadline = time.monotonic() + 30
        while not (output.exists() and "started" in output.read_text()):
            assert time.monotonic() < deadline, f"job {job} did not start its script"
            time.sleep(0.2)

    def sacct_records(self, job: str) -> list[list[str]]:
        """Every record of the job's allocation, earlier runs of a requeued job included (--duplicates)."""
        fields = "JobIDRaw,State,Reason,ExitCode"
        out = self.run("sacct", "-n", "-P", "-X", "--duplicates", "-S", self.since, "-j", job, "-o", fields)
        return [line.split("|") for line in out.splitlines()]

    def cancel_all(self) -> None:
        if self.jobs:
            subprocess.run(["scancel", *self.jobs], env=self.env, timeout=60, check=False)


@pytest.fixture(scope="module")
def cluster(slurm2_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with pytest.MonkeyPatch.context() as patch:
        # SlurmScheduler's commands inherit the environment, as in a server started with this SLURM_CONF.
        patch.setenv("SLURM_CONF", slurm2_env["SLURM_CONF"])
        cluster = Cluster(slurm2_env, tmp_path_factory.mktemp("states"))
        try:
            yield cluster
        finally:
            cluster.cancel_all()


@pytest.fixture(scope="module")
def time_limited_job(cluster: Cluster) -> str:
    """One minute of time limit on the first node; Slurm ends it 60-90 s later (it checks every ~30 s)."""
    return cluster.submit("--time=1", f"--nodelist={cluster.nodes[0]}", "--output=timeout.out")


@pytest.fixture(autouse=True)
def _time_limit_runs_first(time_limited_job: str) -> None:
    """Every test starts the time-limited job's clock if it is not running yet."""


def test_held_job_is_pending_with_slurms_reason(cluster):
    job = cluster.submit("--hold")
    status = cluster.wait(job, lambda status: status.reason == "JobHeldUser")
    assert status == JobStatus(RunState.pending, "PENDING", "JobHeldUser", None)


def test_job_waiting_for_a_busy_node_is_pending_for_resources(cluster, time_limited_job):
    cluster.wait(time_limited_job, lambda status: status.raw_state == "RUNNING")
    job = cluster.submit(f"--nodelist={cluster.nodes[0]}", "--exclusive")
    status = cluster.wait(job, lambda status: status.reason == "Resources")
    assert status == JobStatus(RunState.pending, "PENDING", "Resources", None)
    # It would hold up the other node for the jobs below.
    cluster.run("scancel", job)


def test_requeued_job_is_pending_again_and_sacct_keeps_the_requeued_run(cluster):
    job = cluster.submit(f"--nodelist={cluster.nodes[1]}", "--output=requeue.out", "--open-mode=append")
    cluster.wait(job, lambda status: status.raw_state == "RUNNING")
    cluster.run("scontrol", "requeue", job)
    # Slurm lets a requeued job start again only about two minutes later.
    status = cluster.wait(job, lambda status: status.reason == "BeginTime")
    assert status == JobStatus(RunState.pending, "PENDING", "BeginTime", None)
    # REQUEUED is the state of the run that was requeued; squeue shows the job as PENDING at once.
    assert cluster.sacct_records(job)[0][:2] == [job, "REQUEUED"]
    cluster.run("scancel", job)


def test_job_preempted_by_requeue_is_pending_again(cluster):
    node = f"--nodelist={cluster.nodes[1]}"
    job = cluster.submit("--partition=requeue", node, "--exclusive", "--output=preempted.out", "--open-mode=append")
    cluster.wait(job, lambda status: status.raw_state == "RUNNING")
    urgent = cluster.submit("--partition=urgent", node, "--exclusive", body="sleep 1")
    status = cluster.wait(job, lambda status: status.reason == "BeginTime")
    assert status == JobStatus(RunState.pending, "PENDING", "BeginTime", None)
    assert cluster.sacct_records(job)[0] == [job, "PREEMPTED", "None", "0:0"]
    assert "DUE TO PREEMPTION" in (cluster.tmp_path / "preempted.out").read_text()
    assert cluster.wait(urgent, lambda status: status.state.is_final).raw_state == "COMPLETED"
    cluster.run("scancel", job)


def test_job_preempted_by_cancel_ends_preempted(cluster):
    node = f"--nodelist={cluster.nodes[1]}"
    job = cluster.submit("--partition=cancel", node, "--exclusive")
    cluster.wait(job, lambda status: status.raw_state == "RUNNING")
    cluster.submit("--partition=urgent", node, "--exclusive", body="sleep 1")
    status = cluster.wait(job, lambda status: status.state.is_final)
    assert status == JobStatus(RunState.preempted, "PREEMPTED", None, "0:0")


def message_for(session: Session, status: JobStatus) -> str:
    """What the monitor tells the user of a running run that ends with this status."""
    run = run_row(session, experiment_row(session), Path("/nonexistent"), state=RunState.running, job_id="1")
    assert apply_status(run, status)
    assert run.state is status.state and run.message is not None
    return run.message


def test_job_above_its_memory_ends_out_of_memory(cluster, session):
    if "task/cgroup" not in cluster.run("scontrol", "show", "config"):
        pytest.skip("this cluster does not enforce memory (no cgroup v1 memory controller): see slurm-local --help")
    # Fills 400 MiB with 64 MiB allowed: the memory cgroup's OOM killer ends it, and slurmstepd notices.
    hog = shlex.join([sys.executable, "-c", "data = b'x' * (400 * 2**20)"])
    job = cluster.submit(f"--nodelist={cluster.nodes[1]}", "--mem=64M", "--output=oom.out", body=hog)
    status = cluster.wait(job, lambda status: status.state.is_final)
    assert status == JobStatus(RunState.out_of_memory, "OUT_OF_MEMORY", "OutOfMemory", "0:125")
    assert "oom-kill" in (cluster.tmp_path / "oom.out").read_text()
    message = message_for(session, status)
    assert message.startswith("Slurm killed the job for using more memory than it was allocated. Resubmit it with")
    assert message.endswith("(Slurm's reason: OutOfMemory)")


def slurmd_pid_file(cluster: Cluster) -> str:
    """The pid file slurm.conf names (with %n for the node's name, as scripts/slurm-local writes it)."""
    lines = cluster.run("scontrol", "show", "config").splitlines()
    config = {key.strip(): value.strip() for key, _, value in (line.partition("=") for line in lines)}
    return config["SlurmdPidFile"]


def test_job_on_a_node_that_stops_answering_ends_node_fail(cluster, session):
    node = cluster.nodes[1]
    output = cluster.tmp_path / "node_fail.out"
    # Without --no-requeue Slurm would requeue the job (JobRequeue=1 is the default).
    job = cluster.submit(f"--nodelist={node}", "--no-requeue", f"--output={output}", body="echo started; sleep 300")
    cluster.running(job, output)
    try:
        slurm_clusters.stop_node(node, slurmd_pid_file(cluster))
        # SlurmdTimeout=10 (30 in containers): the node goes DOWN, and its job with it, 30-60 s later here.
        status = cluster.wait(job, lambda status: status.state.is_final, timeout_s=120)
    finally:
        # The node comes back by itself once its slurmd runs again (ReturnToService=2).
        slurm_clusters.restore_nodes()
    assert status == JobStatus(RunState.node_fail, "NODE_FAIL", "NodeDown", slurm_clusters.node_fail_exit_code())
    message = message_for(session, status)
    assert message.startswith("A node of the job failed or stopped answering")
    assert "Resubmit it" in message and message.endswith("(Slurm's reason: NodeDown)")


def test_job_over_its_time_limit_ends_timeout(cluster, time_limited_job):
    status = cluster.wait(time_limited_job, lambda status: status.state.is_final, timeout_s=150)
    assert status == JobStatus(RunState.timeout, "TIMEOUT", "TimeLimit", "0:0")
