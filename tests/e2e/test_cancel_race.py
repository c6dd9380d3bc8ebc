"""Cancelling while runs are being submitted, on the real local Slurm: whichever comes first, a cancelled run ends
with no live job.

The race is made deterministic at the subprocess boundary: a Slurm command is held (after the real command ran)
until the other side has committed. Every job is submitted held (--hold), so none runs: a job still live at the end
is one the race left behind, not one still starting.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from sqlmodel import Session

from benches.held_jobs import LIVE_STATES, cancel, queue
from contract.states import RunState
from server.models import Run
from server.monitor import Monitor
from server.scheduler.commands import run_command
from server.scheduler.slurm import SlurmScheduler
from server.services import submission
from tests.conftest import make_client
from tests.factories import experiment_row, run_row

pytestmark = [pytest.mark.slurm]

# A bound on waiting for the other side, so that a test whose other side never comes fails instead of hanging.
OTHER_SIDE_S = 60


class HeldCommand:
    """A runner that submits every job held, and holds `command` (after it ran for real) until `release()`."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.job_ids: list[str] = []
        self.reached = threading.Event()
        self._released = threading.Event()

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        if argv[0] == "sbatch":
            argv = ["sbatch", "--hold", *argv[1:]]
        result = run_command(argv)
        if argv[0] == "sbatch" and result.returncode == 0:
            self.job_ids.append(result.stdout.strip().split(";")[0])
        if argv[0] == self.command and not self.reached.is_set():
            self.reached.set()
            assert self._released.wait(OTHER_SIDE_S), f"{self.command} was never released"
        return result

    def release(self) -> None:
        self._released.set()


@pytest.fixture
def jobs_left() -> Iterator[list[str]]:
    """Job ids to cancel after the test, whatever it found."""
    ids: list[str] = []
    yield ids
    cancel(ids)


def live(job_ids: list[str]) -> list[tuple[str, str, str]]:
    return [job for job in queue(job_ids) if job[2] in LIVE_STATES]


def in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    answer: list[object] = []
    thread = threading.Thread(target=lambda: answer.append(call()))
    thread.start()
    return thread, answer


ONE_RUN = {
    "name": "cancelled while submitting",
    "base": {"model": "mlp", "dataset": "synthetic", "strategy": "single", "gpus": 1, "epochs": 1},
    "resources": {"time_limit": "00:05:00"},
    "isolation": "shared",
}


def cancel_while_sbatch_runs(settings, runner: HeldCommand, jobs_left: list[str]) -> tuple[dict, list[str | None]]:
    """Submit one run and cancel its experiment while sbatch (held) has the job but has not answered yet: the run
    as it ended up, and the details of its events."""
    with make_client(settings, SlurmScheduler(run=runner)) as client:
        submitting, answer = in_thread(lambda: client.post("/api/experiments", json=ONE_RUN))
        try:
            assert runner.reached.wait(OTHER_SIDE_S), "sbatch was never called"
            jobs_left.extend(runner.job_ids)
            (experiment,) = client.get("/api/experiments").json()["data"]
            cancelled = client.post(f"/api/experiments/{experiment['id']}/cancel")
            assert cancelled.status_code == 202, cancelled.text
        finally:
            runner.release()
            submitting.join()
        (created,) = answer
        (run_id,) = [run["id"] for run in created.json()["runs"]]  # type: ignore[attr-defined]
        events = client.get(f"/api/runs/{run_id}/events").json()["data"]
        return client.get(f"/api/runs/{run_id}").json(), [event["detail"] for event in events]


def test_a_run_cancelled_while_sbatch_runs_leaves_no_live_job(slurm, settings, jobs_left):
    runner = HeldCommand("sbatch")
    run, events = cancel_while_sbatch_runs(settings, runner, jobs_left)
    assert runner.job_ids == jobs_left  # one sbatch, the one held
    assert run["state"] == "cancelled", run
    assert live(runner.job_ids) == [], f"run {run['id']} is cancelled, but its job is still in the queue"
    assert any(f"job {runner.job_ids[0]}" in (detail or "") for detail in events), events


class ScancelRefused(HeldCommand):
    """The same runner, where slurmctld stops answering scancel: the one failure that leaves the job live."""

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        if argv[0] == "scancel":
            return subprocess.CompletedProcess(argv, 1, "", "scancel: error: Unable to contact slurm controller")
        return super().__call__(argv)


def test_a_job_that_cannot_be_cancelled_is_followed_again_so_that_it_can_be(slurm, settings, jobs_left):
    runner = ScancelRefused("sbatch")
    run, _events = cancel_while_sbatch_runs(settings, runner, jobs_left)
    # The job is live: the run says so, with its job, and can be cancelled again.
    assert [job[0] for job in live(runner.job_ids)] == runner.job_ids
    assert (run["state"], run["job_id"], run["ended_at"]) == ("submitted", runner.job_ids[0], None)
    assert "could not be cancelled" in run["message"] and "cancel it again" in run["message"]


def test_a_job_submitted_while_its_experiment_is_cancelled_is_cancelled_too(
    slurm, engine, session, settings, jobs_left
):
    """The cancel read the run before its job id was committed, and writes after: the job must not outlive it."""
    experiment = experiment_row(session)
    first = run_row(session, experiment, settings.runs_dir / "a", state=RunState.created, position=0)
    second = run_row(session, experiment, settings.runs_dir / "b", state=RunState.created, position=1)
    for run in (first, second):
        run_dir = Path(run.run_dir)
        run_dir.mkdir(parents=True)
        (run_dir / "job.sbatch").write_text(
            f"#!/bin/bash\n#SBATCH --job-name=scalelab-{run.id}\n#SBATCH --time=00:05:00\n"
            f"#SBATCH --output={run_dir}/output.log\ntrue\n"
        )
    # The first run is in the queue already; cancelling it (scancel) is held until the second run's job is committed.
    runner = HeldCommand("scancel")
    scheduler = SlurmScheduler(run=runner)
    with Session(engine) as submitting:
        submission.submit_run(submitting, submitting.get(Run, first.id), scheduler)  # type: ignore[arg-type]
    with make_client(settings, scheduler) as client:
        cancelling, answer = in_thread(lambda: client.post(f"/api/experiments/{experiment.id}/cancel"))
        try:
            assert runner.reached.wait(OTHER_SIDE_S), "scancel was never called"
            with Session(engine) as submitting:
                submission.submit_run(submitting, submitting.get(Run, second.id), scheduler)  # type: ignore[arg-type]
            jobs_left.extend(runner.job_ids)
        finally:
            runner.release()
            cancelling.join()
        (response,) = answer
        assert response.status_code == 202, response.text  # type: ignore[attr-defined]
    assert len(runner.job_ids) == 2
    assert live(runner.job_ids) == [], "a run was asked to stop, but its job is still in the queue"
    # Each run's state says what Slurm said: the monitor sees both jobs cancelled (once the accounting has them).
    monitor = Monitor(engine, scheduler, 1.0)
    deadline = time.monotonic() + OTHER_SIDE_S
    while (states := run_states(engine, [first.id, second.id])) != [RunState.cancelled] * 2:
        assert time.monotonic() < deadline, states
        monitor.cycle()
        time.sleep(0.5)


def run_states(engine, run_ids: list[str]) -> list[RunState]:
    with Session(engine) as session:
        return [session.get(Run, run_id).state for run_id in run_ids]  # type: ignore[union-attr]
