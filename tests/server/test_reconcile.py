"""A restarted server's reconcile, with Slurm's commands answered at the subprocess boundary: runs whose array was
submitted but never recorded follow their tasks (one squeue, one sacct for all of them, no sbatch); runs whose
array never reached Slurm are submitted alone; a run cancelled meanwhile has its task cancelled; a resubmitted run
is never taken for its past attempt's task."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from sqlmodel import Session, select

from contract.rundir import SCRIPT_FILE
from contract.states import RunState
from server.models import Experiment, Run, RunEvent, RunEventKind, utcnow
from server.scheduler.naming import array_job_name, job_name
from server.scheduler.slurm import SlurmScheduler
from server.services import arrays, events
from server.services.submission import reconcile
from tests.factories import experiment_row, run_row


class Slurm:
    """Slurm's commands as a controller that holds the arrays `held` (by name, their ids) in its queue and the jobs
    `past` (by name) in its accounting; sbatch answers new ids, unless `refuse` says Slurm is unreachable."""

    def __init__(self, held: dict[str, str], past: dict[str, str]) -> None:
        self.held, self.past, self.refuse = held, past, False
        self.calls: list[list[str]] = []
        self.next_id = 900

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if argv[0] == "sbatch":
            if self.refuse:
                return subprocess.CompletedProcess(argv, 1, "", "sbatch: error: Unable to contact slurm controller")
            self.next_id += 1
            return subprocess.CompletedProcess(argv, 0, f"{self.next_id}\n", "")
        if argv[0] in ("squeue", "sacct"):
            asked = next(arg for arg in argv if arg.startswith("--name=")).removeprefix("--name=").split(",")
            jobs = self.held if argv[0] == "squeue" else self.past
            # As Slurm prints them: squeue's %F the array's id, sacct's JobID a task's.
            rows = [f"{name}|{job}" if argv[0] == "squeue" else f"{name}|{job}_0" for name, job in jobs.items()]
            answer = "".join(f"{row}\n" for row in rows if row.split("|")[0] in asked)
            return subprocess.CompletedProcess(argv, 0, answer, "")
        return subprocess.CompletedProcess(argv, 0, "", "")

    def commands(self, name: str) -> list[list[str]]:
        return [argv for argv in self.calls if argv[0] == name]


def runs_of(session: Session, runs_dir: Path, count: int, *, cancelled_first: bool = False) -> list[Run]:
    """An experiment's runs as creating it writes them, before they are submitted: rows, directories, scripts."""
    experiment = experiment_row(session)
    runs = []
    for position in range(count):
        state = RunState.cancelled if cancelled_first and position == 0 else RunState.created
        run = run_row(session, experiment, runs_dir, state=state, position=position)
        run.run_dir = str(runs_dir / run.id)
        Path(run.run_dir).mkdir(parents=True)
        (Path(run.run_dir) / SCRIPT_FILE).write_text(
            f"#!/bin/bash\n#SBATCH --job-name={job_name(run.id)}\n#SBATCH --nodes=1\necho hi\n"
        )
        session.add(run)
        runs.append(run)
    session.commit()
    return runs


def experiment_of(session: Session, run: Run) -> Experiment:
    experiment = session.get(Experiment, run.experiment_id)
    assert experiment is not None
    return experiment


def submitted_unrecorded(runs: list[Run], runs_dir: Path, slurm: Slurm) -> str | None:
    """Submit the runs as one array, and record nothing: the server stopped before it could. The array's job id,
    None where sbatch never answered."""
    outcomes = arrays.submit(arrays.RunArray(runs, None), runs_dir, SlurmScheduler(run=slurm))
    answer = outcomes[0][1]
    return answer.split("_")[0] if isinstance(answer, str) else None


def test_a_restarted_server_finds_the_tasks_of_arrays_it_never_recorded(engine, session, settings):
    runs_dir = settings.runs_dir
    slurm = Slurm(held={}, past={})
    in_slurm = runs_of(session, runs_dir, 3)
    array = submitted_unrecorded(in_slurm, runs_dir, slurm)
    # The first run of this one was cancelled while its array was being submitted: its task runs all the same.
    with_cancelled = runs_of(session, runs_dir, 3, cancelled_first=True)
    other_array = submitted_unrecorded(with_cancelled, runs_dir, slurm)
    # This array's script was written, but sbatch never reached Slurm.
    never = runs_of(session, runs_dir, 2)
    slurm.refuse = True
    assert submitted_unrecorded(never, runs_dir, slurm) is None
    slurm.refuse = False
    # A run that went as task 0 of an array long ago, ended, was resubmitted alone, and the server stopped before
    # sbatch: its past attempt's task must not be taken for its job.
    resubmitted = runs_of(session, runs_dir, 2)
    old_array = submitted_unrecorded(resubmitted, runs_dir, slurm)
    for run in resubmitted:
        run.attempt = 1
        session.add(run)
    session.commit()
    # An array that was recorded, but for its first run, cancelled meanwhile (its task was cancelled then); a rerun
    # of that experiment was left unsubmitted: neither is taken for a task of that array.
    recorded = runs_of(session, runs_dir, 3, cancelled_first=True)
    recorded_array = submitted_unrecorded(recorded, runs_dir, slurm)
    for index, run in enumerate(recorded[1:], start=1):
        run.job_id, run.attempt, run.state = f"{recorded_array}_{index}", 1, RunState.completed
        session.add(run)
    rerun = run_row(session, experiment_of(session, recorded[0]), runs_dir, state=RunState.created, position=3)
    rerun.run_dir = str(runs_dir / rerun.id)
    Path(rerun.run_dir).mkdir()
    (Path(rerun.run_dir) / SCRIPT_FILE).write_text("#!/bin/bash\n#SBATCH --nodes=1\necho hi\n")
    session.add(rerun)
    session.commit()
    resubmitted.append(rerun)
    assert array and other_array and old_array and recorded_array
    slurm.past = {array_job_name(resubmitted[0].id): old_array, array_job_name(recorded[0].id): recorded_array}
    slurm.held = {array_job_name(in_slurm[0].id): array, array_job_name(with_cancelled[0].id): other_array}
    sbatch_before = len(slurm.commands("sbatch"))

    reconcile(engine, SlurmScheduler(run=slurm), utcnow())

    with Session(engine) as check:
        job_of = {run.id: run.job_id for run in check.exec(select(Run)).all()}.get
        assert [job_of(run.id) for run in in_slurm] == [f"{array}_{index}" for index in range(3)]
        assert [job_of(run.id) for run in with_cancelled] == [None, f"{other_array}_1", f"{other_array}_2"]
        alone = [job_of(run.id) for run in [*never, *resubmitted]]
        assert all(job is not None and "_" not in job for job in alone), alone
        details = check.exec(
            select(RunEvent.detail).where(RunEvent.run_id == in_slurm[1].id, RunEvent.kind == RunEventKind.reconciled)
        ).all()
        assert details == [f"found its job after a server restart: task 1 of array job {array}"]
        first = check.get(Run, with_cancelled[0].id)
        assert first is not None and first.state is RunState.cancelled
        left = {run.id for run in recorded}
        states = {run.state for run in check.exec(select(Run)).all() if run.id not in {first.id, *left}}
        assert states == {RunState.submitted}
        assert len(check.exec(select(Experiment)).all()) == 5
        cancelled_long_ago = check.get(Run, recorded[0].id)
        assert cancelled_long_ago is not None and cancelled_long_ago.state is RunState.cancelled
    # One squeue and one sacct asked for every run and array; the runs found were not submitted again, the others
    # one by one; the cancelled run's task was cancelled.
    assert (len(slurm.commands("squeue")), len(slurm.commands("sacct"))) == (1, 1)
    # Tasks of seconds end before a server is back: the queue still has them (MinJobAge) only with --states=all,
    # and slurmdbd may not have them yet (a test on the real Slurm saw both).
    assert "--states=all" in slurm.commands("squeue")[0]
    submitted = [argv[-1] for argv in slurm.commands("sbatch")[sbatch_before:]]
    assert sorted(submitted) == sorted(str(Path(run.run_dir) / SCRIPT_FILE) for run in [*never, *resubmitted])
    assert slurm.commands("scancel") == [["scancel", f"{other_array}_0"]]


def test_a_resubmitted_run_lost_before_its_sbatch_is_not_given_its_earlier_job(engine, session, settings):
    """Resubmitting commits the run (created, no job) before sbatch: a server that stopped between them finds, by
    the run's name, the job of its earlier attempt in the accounting; that job ended long ago and is not this
    attempt's, so the run is submitted again rather than given that job's end."""
    (run,) = runs_of(session, settings.runs_dir, 1)
    run.job_id, run.state = "700", RunState.failed
    events.record(session, run, RunEventKind.submitted)
    events.record(session, run, RunEventKind.resubmitted, "after failed")
    run.job_id, run.state, run.attempt = None, RunState.created, 1
    session.add(run)
    session.commit()
    slurm = Slurm(held={}, past={job_name(run.id): "700"})  # sacct --name finds the earlier attempt's job

    reconcile(engine, SlurmScheduler(run=slurm), utcnow())

    with Session(engine) as check:
        again = check.get(Run, run.id)
        assert again is not None and again.state is RunState.submitted
        assert again.job_id == str(slurm.next_id)
    assert len(slurm.commands("sbatch")) == 1
