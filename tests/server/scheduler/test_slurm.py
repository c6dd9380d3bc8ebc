"""The Slurm scheduler against the real local Slurm: submit, poll in one call, cancel, refusals, accounting."""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest

from contract.states import RunState
from server.models import utcnow
from server.scheduler import CLOCK_MARGIN, EndedJob, Job, JobStatus, SchedulerError, SchedulerUnavailable, statuses_of
from server.scheduler.slurm import SlurmScheduler
from server.services.accounting import cpu_efficiency
from tests.factories import batch_script, wait_final

# Seconds the tests wait after a job's end before asking for its accounting (the service waits longer).
SETTLE_S = 5

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


# Each task says it is ready, notes USR2 in a file of its own and runs on; the batch shell would end of a USR2, and
# the job with it.
NOTES_USR2 = (
    'srun bash -c \'trap "echo usr2 >> got-$SLURM_PROCID" USR2; touch ready-$SLURM_PROCID; '
    "while true; do sleep 0.2; done'"
)


def wait_for_files(folder, names: list[str], timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not all((folder / name).exists() for name in names):
        assert time.monotonic() < deadline, sorted(path.name for path in folder.iterdir())
        time.sleep(0.3)


def test_a_signal_reaches_every_task_and_not_the_batch_script(slurm, tmp_path):
    scheduler = SlurmScheduler()
    job = scheduler.submit(batch_script(tmp_path, NOTES_USR2, tasks=2), tmp_path)
    try:
        wait_for_files(tmp_path, ["ready-0", "ready-1"])
        scheduler.signal(job, "USR2")
        wait_for_files(tmp_path, ["got-0", "got-1"])
        assert scheduler.poll([Job(job)])[Job(job)].state is RunState.running
    finally:
        scheduler.cancel(job)
    with pytest.raises(SchedulerError):
        scheduler.signal("999999", "USR2")


def test_slurm_refuses_a_job_larger_than_the_cluster(slurm, tmp_path):
    with pytest.raises(SchedulerError, match=r"sbatch refused the job: .*More processors requested than permitted"):
        SlurmScheduler().submit(batch_script(tmp_path, "true", tasks=64), tmp_path)


def test_unknown_job_ids_are_left_out(slurm):
    assert SlurmScheduler().poll([Job("999999")]) == {}
    assert SlurmScheduler().poll([]) == {}


def test_an_unreachable_accounting_database_is_unavailability():
    def sacct_down(argv):
        if argv[0] == "squeue":
            return subprocess.CompletedProcess(argv, 0, "", "")
        return subprocess.CompletedProcess(
            argv, 1, "", "sacct: error: Problem talking to the database: Connection refused"
        )

    with pytest.raises(SchedulerUnavailable, match=r"Slurm cannot be reached \(sacct: .*Connection refused"):
        SlurmScheduler(run=sacct_down).poll([Job("12")])


# ---- accounting --------------------------------------------------------------------------------------------------


def foreign_job(tmp_path, command: str, *options: str) -> str:
    """A job that is not scalelab's, as another user of the cluster would submit it."""
    argv = ["sbatch", "--parsable", f"--chdir={tmp_path}", "--output=/dev/null", *options, "--wrap", command]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip().split(";")[0]


def wait_running(scheduler: SlurmScheduler, job_id: str, timeout_s: float = 60) -> str:
    """The node list of the job once it runs."""
    deadline = time.monotonic() + timeout_s
    while (status := scheduler.poll([Job(job_id)])[Job(job_id)]).state is not RunState.running:
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} did not start within {timeout_s} s; the cluster then:\n{cluster_now()}")
        time.sleep(0.2)
    assert status.nodes, status
    return status.nodes


def cluster_now() -> str:
    """What holds the nodes, for a test's failure message: the queue and the nodes' states."""
    said = [subprocess.run(argv, capture_output=True, text=True) for argv in (["squeue", "-a"], ["sinfo", "-N", "-l"])]
    return "\n".join(answer.stdout + answer.stderr for answer in said)


def settle() -> None:
    """Wait as the accounting service does after a job's end, until slurmdbd's answer by nodes and time has it."""
    time.sleep(SETTLE_S)


def ended(scheduler, job_id: str, since) -> EndedJob:
    """The ended job as the monitor knows it: its nodes from the poll, its window from submission to now."""
    status = wait_final(scheduler, [job_id])[job_id]
    assert status.nodes, status
    return EndedJob(job_id, status.nodes, since, utcnow())


# A step of real work: a second of busy CPU holding 64 MB, with memory sampled each second (the cluster samples
# every 30 s, which a short step never reaches).
BUSY_STEP = (
    "srun --acctg-freq=1 python3 -c 'import time; held = bytearray(64 * 2**20); s = time.time()\n"
    "while time.time() - s < 2: pass'"
)


def test_accounting_names_the_jobs_that_shared_the_nodes_and_what_the_job_used(slurm, tmp_path):
    scheduler = SlurmScheduler()
    since = utcnow()
    other = foreign_job(tmp_path, "sleep 60")
    # Ours on the node where the other runs (the cluster may have more than one: 24.11's has two).
    node = wait_running(scheduler, other)
    ours = scheduler.submit(batch_script(tmp_path, f"#SBATCH --nodelist={node}\n{BUSY_STEP}"), tmp_path)
    job = ended(scheduler, ours, since)
    scheduler.cancel(other)
    wait_final(scheduler, [other])
    settle()

    figures = scheduler.accounting([job])[ours]
    assert other in figures.shared_with
    assert ours not in figures.shared_with
    assert figures.nodes == job.nodes
    assert figures.start is not None and figures.end is not None and figures.start <= figures.end
    assert figures.elapsed_s >= 2 and figures.alloc_cpus == 1
    efficiency = cpu_efficiency(figures.total_cpu_s, figures.elapsed_s, figures.alloc_cpus)
    assert efficiency is not None and 0 < efficiency < 1.5  # a busy loop, on cores other jobs share
    assert figures.max_rss_bytes is not None and figures.max_rss_bytes >= 64 * 2**20
    # This cluster has no GPU and no energy plugin: not gathered, rather than 0.
    assert (figures.gpu_util, figures.gpu_mem_bytes, figures.energy_j) == (None, None, None)


def test_an_exclusive_job_shared_its_node_with_nobody_not_even_the_job_right_after_it(slurm, tmp_path):
    scheduler = SlurmScheduler()
    since = utcnow()
    ours = scheduler.submit(batch_script(tmp_path, "#SBATCH --exclusive\nsleep 2"), tmp_path)
    # A whole node: it waits for one to empty, which on a cluster other tests used a moment ago may take minutes
    # (a job ending, a node back from a test that stopped its slurmd).
    node = wait_running(scheduler, ours, timeout_s=300)
    # On ours' node, it waits for that node, then starts when ours ends.
    after = foreign_job(tmp_path, "sleep 1", f"--nodelist={node}")
    jobs = [ended(scheduler, ours, since), ended(scheduler, after, since)]
    settle()
    found = scheduler.accounting(jobs)
    assert found[ours].shared_with == ()
    assert ours not in found[after].shared_with
    ours_end, after_start = found[ours].end, found[after].start
    assert ours_end is not None and after_start is not None and ours_end <= after_start


def test_jobs_the_accounting_database_does_not_have_are_left_out(slurm):
    node = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True).stdout
    now = utcnow()
    assert SlurmScheduler().accounting([EndedJob("999999999", node.split()[0], now, now)]) == {}
    assert SlurmScheduler().accounting([]) == {}


def test_an_unreachable_accounting_database_stops_the_accounting(tmp_path):
    def sacct_down(argv):
        return subprocess.CompletedProcess(argv, 1, "", "sacct: error: Problem talking to the database")

    now = utcnow()
    with pytest.raises(SchedulerUnavailable, match="sacct"):
        SlurmScheduler(run=sacct_down).accounting([EndedJob("12", "n1", now, now)])


# ---- telling jobs of one id apart --------------------------------------------------------------------------------


def test_the_queue_and_the_accounting_database_say_each_jobs_name_and_submit_time(slurm, tmp_path):
    """What tells a job from another that a wiped controller gave the same id, read from the real squeue (while it
    waits) and the real sacct (once it ended): a record is taken only for the job it names, submitted after its run
    was made."""
    scheduler = SlurmScheduler()
    made = utcnow()
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=scalelab-idcheck\n#SBATCH --hold\n#SBATCH --time=1\ntrue\n")
    job_id = scheduler.submit(script, tmp_path)
    ours = Job(job_id, "scalelab-idcheck", made)
    others = [
        Job(job_id, "scalelab-another"),
        Job(job_id, "scalelab-idcheck", made + CLOCK_MARGIN + timedelta(hours=1)),
    ]
    try:
        queued = scheduler.poll([ours, *others])
        assert list(queued) == [ours]
        assert (queued[ours].state, queued[ours].name) == (RunState.pending, "scalelab-idcheck")
        submitted = queued[ours].submitted
        assert submitted is not None and made - CLOCK_MARGIN <= submitted <= utcnow()
    finally:
        scheduler.cancel(job_id)
    deadline = time.monotonic() + 60
    while (ended := scheduler.poll([ours, *others])).get(ours) is None or ended[ours].exit_code is None:
        assert time.monotonic() < deadline, f"sacct had no end of job {job_id} within 60 s: {ended}"
        time.sleep(0.5)
    assert list(ended) == [ours]  # the exit code comes from sacct only: its row named the job and its submission
    assert (ended[ours].state, ended[ours].name) == (RunState.cancelled, "scalelab-idcheck")
    assert ended[ours].submitted == queued[ours].submitted


def record(name: str | None, submitted: datetime | None, state: RunState = RunState.completed) -> JobStatus:
    return JobStatus(state, state.name.upper(), name=name, submitted=submitted)


def test_a_requeued_jobs_latest_record_of_its_own_is_taken_and_another_jobs_never():
    made = datetime(2026, 3, 1, 12, tzinfo=UTC)
    job = Job("7", "scalelab-ours", made)
    first = record("scalelab-ours", made + timedelta(minutes=1), RunState.pending)
    requeued = record("scalelab-ours", made + timedelta(minutes=30))
    before_the_wipe = record("scalelab-ours", made - CLOCK_MARGIN - timedelta(seconds=1), RunState.failed)
    another = record("scalelab-theirs", made + timedelta(hours=1), RunState.running)
    found = statuses_of([job], [("7", requeued), ("7", first), ("7", before_the_wipe), ("7", another)])
    assert found == {job: requeued}
    assert statuses_of([job], [("7", another), ("7", before_the_wipe), ("8", requeued)]) == {}
    # A record that says neither (a fake, or a backend that does not report them) contradicts nothing.
    assert statuses_of([job], [("7", record(None, None))]) == {job: record(None, None)}
