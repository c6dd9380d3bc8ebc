"""Runs whose jobs run as their users and make their own run directories: the server writes nothing there and keeps
the script it submits in <runs_dir>/.scripts; the runs directory it starts on; and the rendered script, run for real
as Unix users this test creates (as root), leaves the directory and its files to its user, readable by the service's
group only, and refuses a directory someone else made first."""

from __future__ import annotations

import dataclasses
import grp
import logging
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from sqlmodel import Session

from contract.states import RunState
from server.config import Settings
from server.main import create_app
from server.models import Run
from server.profiles import BUILTIN_DIR, load_profile
from server.render import BatchJob, render_script
from server.runfiles import Unreadable
from server.scheduler import EndedJob, Job, JobAccounting, JobStatus
from server.scheduler.choice import SchedulerUnusable
from server.scheduler.naming import NO_ARRAYS, ArrayTasks
from server.services import rundirs
from tests.conftest import make_client
from tests.factories import experiment_request, spec

# ---- a scheduler that runs jobs as their users (the slurmrestd backend's stand-in) ---------------------------


class AsUser:
    """Records what it is asked to submit; runs nothing."""

    name = "as-user"
    submit_concurrency = 2
    runs_as_user = True
    uses_slurm = True

    def __init__(self) -> None:
        self.submitted: list[tuple[Path, Path]] = []

    def submit(self, script: Path, run_dir: Path, user: str | None = None) -> str:
        self.submitted.append((script, run_dir))
        return str(len(self.submitted))

    def poll(self, jobs: Sequence[Job]) -> dict[Job, JobStatus]:
        return {}

    def cancel(self, job_id: str, user: str | None = None) -> None:
        pass

    def signal(self, job_id: str, signal_name: str, user: str | None = None) -> None:
        pass

    def ping(self) -> None:
        pass

    def jobs_of(self, run_ids: Sequence[str], arrays: ArrayTasks = NO_ARRAYS) -> dict[str, str]:
        return {}

    def accounting(self, jobs: Sequence[EndedJob]) -> dict[str, JobAccounting]:
        return {}


def job_lines(output: str) -> list[str]:
    """A job's output without the launch records its batch script writes around the launcher (and the empty line
    before an end record): what the worker and the script's own messages said."""
    return [line for line in output.splitlines() if line and '"kind":"launch"' not in line]


def shared_root(path: Path) -> Path:
    """A runs directory as the admin sets it up (owned by whoever runs the tests, with their group)."""
    path.mkdir()
    path.chmod(0o3733)
    return path


@pytest.fixture
def as_user(settings: Settings) -> AsUser:
    shared_root(settings.runs_dir)
    return AsUser()


def test_the_server_writes_nothing_in_the_run_directory_and_submits_its_own_copy(settings, as_user):
    with make_client(settings, as_user) as client:
        run = client.post("/api/experiments", json=experiment_request(grid={"gpus": [1, 2]})).json()["runs"][0]
        page = client.get(f"/runs/{run['id']}").text
    run_dir = settings.runs_dir / run["id"]
    copy = settings.runs_dir / ".scripts" / f"{run['id']}.sbatch"
    assert run["run_dir"] == str(run_dir) and not run_dir.exists()
    assert copy.parent.stat().st_mode & 0o777 == 0o700 and stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert (copy, run_dir) in as_user.submitted
    script = copy.read_text()
    assert "#SBATCH --output=/dev/null\n" in script and f"mkdir -p -- {run_dir} ||" in script
    assert "#SBATCH --output=/dev/null" in page and "SCALELAB_SPEC" in page  # the run page shows that copy
    assert rundirs.read_script(run_dir, None) == script


def test_the_preview_is_the_script_submission_keeps(settings, as_user):
    with make_client(settings, as_user) as client:
        request = experiment_request(grid={"gpus": [2]})
        preview = client.post("/api/experiments/preview", json=request).json()
        run = client.post("/api/experiments", json=request).json()["runs"][0]
    kept = (settings.runs_dir / ".scripts" / f"{run['id']}.sbatch").read_text()
    assert preview["script"] == kept.replace(run["id"], "RUN_ID")


def test_resubmitting_submits_the_same_copy(settings, as_user):
    with make_client(settings, as_user) as client:
        run = client.post("/api/experiments", json=experiment_request(grid={"gpus": [1]})).json()["runs"][0]
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            row = session.get(Run, run["id"])
            assert row is not None
            row.state = RunState.failed
            session.add(row)
            session.commit()
        assert client.post(f"/api/runs/{run['id']}/resubmit").status_code == 200
    assert as_user.submitted[-1] == (settings.runs_dir / ".scripts" / f"{run['id']}.sbatch", Path(run["run_dir"]))
    assert len(as_user.submitted) == 2


def test_deleting_a_run_leaves_its_users_directory(settings, as_user, caplog):
    with make_client(settings, as_user) as client:
        run = client.post("/api/experiments", json=experiment_request(grid={"gpus": [1]})).json()["runs"][0]
        run_dir = Path(run["run_dir"])
        run_dir.mkdir()  # as its job would have
        (run_dir / "output.log").write_text("trained\n")
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            row = session.get(Run, run["id"])
            assert row is not None
            row.state = RunState.completed
            session.add(row)
            session.commit()
        with caplog.at_level(logging.INFO, logger="server.services.deletion"):
            assert client.delete(f"/api/runs/{run['id']}").status_code == 204
        assert client.get(f"/api/runs/{run['id']}").status_code == 404
    assert job_lines((run_dir / "output.log").read_text())[-1] == "trained"
    assert not (settings.runs_dir / ".scripts" / f"{run['id']}.sbatch").exists()
    assert f"its directory {run_dir} belongs to its user" in caplog.text


def test_a_failed_creation_keeps_no_copy(settings, as_user, monkeypatch):
    from server.services import submission

    calls = {"n": 0}
    original = submission._prepare_run

    def second_fails(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # the first run's copy is written by then
            raise OSError(28, "No space left on device")
        return original(*args, **kwargs)

    monkeypatch.setattr(submission, "_prepare_run", second_fails)
    with make_client(settings, as_user) as client:
        response = client.post("/api/experiments", json=experiment_request(grid={"gpus": [1, 2]}))
    assert response.status_code == 507, response.text
    assert list((settings.runs_dir / ".scripts").iterdir()) == []
    assert as_user.submitted == []


def test_one_person_instances_write_the_directory_as_before(settings, local_scheduler):
    with make_client(settings, local_scheduler) as client:
        run = client.post("/api/experiments", json=experiment_request(grid={"gpus": [1]})).json()["runs"][0]
    run_dir = Path(run["run_dir"])
    assert (run_dir / "job.sbatch").is_file() and (run_dir / "spec.json").is_file()
    assert "--output=/dev/null" not in (run_dir / "job.sbatch").read_text()
    assert not (settings.runs_dir / ".scripts").exists()


# ---- the runs directory the server starts on ----------------------------------------------------------------


def refusal(path: Path) -> str:
    with pytest.raises(rundirs.RunsDirUnfit) as caught:
        rundirs.check_shared_root(path)
    return str(caught.value)


def me() -> tuple[str, str]:
    return pwd.getpwuid(os.geteuid()).pw_name, grp.getgrgid(os.getegid()).gr_name


def test_a_fit_runs_directory_passes_and_gets_the_services_scripts_directory(tmp_path):
    runs = shared_root(tmp_path / "runs")
    rundirs.check_shared_root(runs)
    assert (runs / ".scripts").lstat().st_mode & 0o777 == 0o700  # (setgid inherited)
    rundirs.check_shared_root(runs)  # again, as at every start


def test_a_missing_runs_directory_says_how_to_make_it(tmp_path):
    user, group = me()
    assert f"install -d -o {user} -g {group} -m 3733 {tmp_path / 'runs'}" in refusal(tmp_path / "runs")


def test_an_ordinary_directory_is_refused_with_the_chmod_to_run(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o755)
    runs.chmod(0o755)
    message = refusal(runs)
    for why in ("lacks the setgid bit", "lacks the sticky bit", "lets every user list the runs", "other users through"):
        assert why in message
    assert message.endswith(f"Run, as root: chmod 3733 {runs}")


@pytest.mark.parametrize("mode", [0o3777, 0o3737, 0o1733, 0o2733, 0o3730])
def test_every_missing_bit_or_extra_read_is_refused(tmp_path, mode):
    runs = tmp_path / "runs"
    runs.mkdir()
    runs.chmod(mode)
    assert f"chmod 3733 {runs}" in refusal(runs)


def test_a_link_is_refused(tmp_path):
    runs = shared_root(tmp_path / "runs")
    (tmp_path / "link").symlink_to(runs)
    assert "is not a directory (or is a link)" in refusal(tmp_path / "link")


def test_a_scripts_directory_someone_else_could_use_is_refused(tmp_path):
    runs = shared_root(tmp_path / "runs")
    (runs / ".scripts").mkdir()
    (runs / ".scripts").chmod(0o755)
    assert "has mode 0755" in refusal(runs) and "rm -rf -- " in refusal(runs)
    (runs / ".scripts").rmdir()
    (runs / ".scripts").symlink_to(tmp_path)
    assert ".scripts, where scalelab keeps the batch scripts it submits, is a link" in refusal(runs)


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: chown, and Unix users this test creates")


@root_only
def test_an_owner_or_group_not_the_services_is_refused_with_the_chown_or_chgrp(tmp_path):
    user, group = me()
    runs = shared_root(tmp_path / "runs")
    os.chown(runs, 54321, -1)
    assert f"chown {user} {runs}" in refusal(runs)
    os.chown(runs, os.geteuid(), 54321)
    runs.chmod(0o3733)  # chown clears setgid
    assert f"chgrp {group} {runs}" in refusal(runs)
    os.chown(runs, os.geteuid(), os.getegid())
    runs.chmod(0o3733)
    (runs / ".scripts").mkdir(mode=0o700)
    os.chown(runs / ".scripts", 54321, -1)  # another user's, made before the service started
    assert "belongs to uid 54321" in refusal(runs)


def test_the_server_refuses_to_start_on_an_unfit_runs_directory(settings):
    settings.runs_dir.mkdir(mode=0o755)
    with pytest.raises(SchedulerUnusable, match=r"runs jobs as their users, but the runs directory .* chmod 3733"):
        create_app(settings, AsUser(), start_monitor=False)


# ---- the rendered script, run --------------------------------------------------------------------------------


def own_job(run_dir: Path, worker: Path, prompts: str | None = None) -> BatchJob:
    profile = load_profile(BUILTIN_DIR / "local.toml")
    return BatchJob(
        run_id=run_dir.name,
        run_dir=run_dir,
        time_limit="00:01:00",
        profile=profile,
        partition=profile.default_partition,
        worker_python=worker,
        launcher="local",
        job_creates_dir=True,
        prompts=prompts,
    )


WORKER = """#!/bin/bash
# Stands for the worker (the users cannot run the project's Python, which lives under /root): it writes as one.
set -eu
echo "worker $(id -un) in $PWD"
mkdir -p checkpoints/epoch-1
echo weights > checkpoints/epoch-1/model.pt
"""


def test_a_requeued_job_runs_the_script_again_in_the_same_directory(tmp_path):
    worker = tmp_path / "worker"
    worker.write_text(WORKER)
    worker.chmod(0o755)
    run_dir = tmp_path / "runs" / "run1"
    run_dir.parent.mkdir()
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(spec(), own_job(run_dir, worker, prompts="hello\n")))
    for _ in range(2):
        result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, check=False)
        assert result.returncode == 0, result.stderr
    assert (run_dir / "output.log").read_text().count("worker ") == 2  # appended, as --open-mode=append did
    assert (run_dir / "prompts.txt").read_text() == "hello\n"
    assert spec().model_validate_json((run_dir / "spec.json").read_text()) == spec()
    assert not list(run_dir.glob(".*.partial"))


def test_a_node_without_the_runs_directory_makes_none(tmp_path):
    """Where a node does not mount the shared file system, mkdir -p would make the runs directory on the node."""
    run_dir = tmp_path / "unmounted" / "runs" / "run1"
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(spec(), own_job(run_dir, Path("/bin/true"))))
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 1 and "no runs directory" in result.stderr
    assert not (tmp_path / "unmounted").exists()


# Unix users of the test: the run's user, another user, and the service (whose own group the runs directory has).
OWNER, OTHER, SERVICE = "scalelab-t1", "scalelab-t2", "scalelab-tsvc"


def _ensure_user(name: str) -> None:
    if subprocess.run(["id", "-u", name], capture_output=True, check=False).returncode != 0:
        subprocess.run(["useradd", "--create-home", "--user-group", name], check=True, capture_output=True)


def as_(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", *argv], capture_output=True, text=True, timeout=60, check=False)


# The tests of `shared` make the same users as the Slurm one (when missing): under pytest-xdist they join its group
# (tests/conftest.py) and take turns with it rather than race to create them.
WITH_THE_SLURM_TESTS = pytest.mark.xdist_group("slurm-one-node")


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A runs directory set up as on a shared instance, in a place every test user can reach (pytest's own
    temporary directories are root's, 0700)."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        pytest.skip("needs root, useradd and runuser: it creates Unix users and runs the script as them")
    for name in (OWNER, OTHER, SERVICE):
        _ensure_user(name)
    base = Path(tempfile.mkdtemp(prefix="scalelab-own-", dir="/tmp"))
    try:
        base.chmod(0o755)
        worker = base / "worker"
        worker.write_text(WORKER)
        worker.chmod(0o755)
        runs = base / "runs"
        runs.mkdir()
        shutil.chown(runs, SERVICE, SERVICE)
        runs.chmod(0o3733)
        yield runs
    finally:
        shutil.rmtree(base)


def _script_for(runs: Path, run_id: str) -> Path:
    script = runs.parent / f"{run_id}.sbatch"
    script.write_text(render_script(spec(), own_job(runs / run_id, runs.parent / "worker", prompts="hello\n")))
    script.chmod(0o644)
    return script


@WITH_THE_SLURM_TESTS
def test_the_job_makes_a_directory_of_its_users_that_only_the_service_reads(shared):
    runs = shared
    run_dir = runs / "run1"
    script = _script_for(runs, "run1")
    ran = as_(OWNER, "bash", str(script))
    assert ran.returncode == 0, ran.stderr
    owner, service_group = pwd.getpwnam(OWNER).pw_uid, grp.getgrnam(SERVICE).gr_gid
    made = {
        run_dir: 0o2750,  # setgid kept, from the runs directory: what the job makes below inherits the group too
        run_dir / "output.log": 0o640,
        run_dir / "spec.json": 0o640,
        run_dir / "prompts.txt": 0o640,
        run_dir / "checkpoints": 0o2750,
        run_dir / "checkpoints" / "epoch-1": 0o2750,
        run_dir / "checkpoints" / "epoch-1" / "model.pt": 0o640,
    }
    for path, mode in made.items():
        info = path.lstat()
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (owner, service_group, mode), path
    said = job_lines((run_dir / "output.log").read_text())
    # The job says whose it is, then the worker runs.
    assert said[0].startswith("scalelab: job ") and f"runs as {OWNER} (uid {pwd.getpwnam(OWNER).pw_uid})" in said[0]
    assert said[1:] == [f"worker {OWNER} in {run_dir}"]
    # The service reads through its group, and writes nothing there.
    assert job_lines(as_(SERVICE, "cat", str(run_dir / "output.log")).stdout)[-1] == f"worker {OWNER} in {run_dir}"
    assert as_(SERVICE, "cat", str(run_dir / "checkpoints" / "epoch-1" / "model.pt")).returncode == 0
    assert as_(SERVICE, "touch", str(run_dir / "planted")).returncode != 0
    # Another user can neither list the runs, nor read, write or remove the run's files.
    for argv in (
        ["ls", str(runs)],
        ["ls", str(run_dir)],
        ["cat", str(run_dir / "spec.json")],
        ["cat", str(run_dir / "output.log")],
        ["touch", str(run_dir / "planted")],
        ["rm", "-rf", str(run_dir)],
        ["mv", str(run_dir), str(runs / "moved")],
    ):
        assert as_(OTHER, *argv).returncode != 0, argv
    assert (run_dir / "output.log").is_file() and not (run_dir / "planted").exists()
    # Requeued: the script runs again in the directory it made.
    again = as_(OWNER, "bash", str(script))
    assert again.returncode == 0, again.stderr
    assert (run_dir / "output.log").read_text().count(f"worker {OWNER}") == 2


@WITH_THE_SLURM_TESTS
def test_a_directory_another_user_made_first_is_refused(shared):
    runs = shared
    squatted = runs / "run2"
    assert as_(OTHER, "mkdir", "-m", "0777", str(squatted)).returncode == 0
    ran = as_(OWNER, "bash", str(_script_for(runs, "run2")))
    assert ran.returncode == 1
    assert list(squatted.iterdir()) == []  # nothing of the run's went into the other user's directory
    assert squatted.stat().st_uid == pwd.getpwnam(OTHER).pw_uid


@WITH_THE_SLURM_TESTS
def test_a_link_to_a_directory_of_the_users_own_is_refused(shared):
    runs = shared
    home = Path(pwd.getpwnam(OWNER).pw_dir)
    before = sorted(path.name for path in home.iterdir())
    assert as_(OTHER, "ln", "-s", str(home), str(runs / "run3")).returncode == 0
    ran = as_(OWNER, "bash", str(_script_for(runs, "run3")))
    assert ran.returncode == 1
    assert sorted(path.name for path in home.iterdir()) == before  # no output.log or spec.json written there


@pytest.mark.slurm
def test_on_slurm_the_job_runs_as_its_user_and_makes_its_directory(slurm, shared):
    """The same script submitted by its user to the real local Slurm (sbatch, then srun for the tasks)."""
    runs = shared
    run_dir = runs / "slurm1"
    script = runs.parent / "slurm1.sbatch"
    batch = dataclasses.replace(own_job(run_dir, runs.parent / "worker"), launcher="srun")
    script.write_text(render_script(spec(), batch))
    script.chmod(0o644)
    ran = as_(OWNER, "sbatch", "--wait", "--parsable", f"--chdir={runs}", str(script))
    assert ran.returncode == 0, ran.stderr
    info = run_dir.lstat()
    assert (info.st_uid, info.st_gid) == (pwd.getpwnam(OWNER).pw_uid, grp.getgrnam(SERVICE).gr_gid)
    assert stat.S_IMODE((run_dir / "output.log").lstat().st_mode) == 0o640
    assert job_lines((run_dir / "output.log").read_text())[-1] == f"worker {OWNER} in {run_dir}"


def test_the_service_follows_no_link_a_user_puts_in_their_run_directory(tmp_path):
    """A run directory is its user's to change: a `checkpoints` link to another user's run (which the service could
    read through its group) lists nothing, as do links of the output and generations."""
    theirs = tmp_path / "theirs"
    (theirs / "checkpoints" / "epoch-3").mkdir(parents=True)
    (theirs / "output.log").write_text("[METRIC] not yours\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    assert rundirs.checkpoint_epochs(theirs, None) == [3]
    (mine / "checkpoints").symlink_to(theirs / "checkpoints")
    (mine / "output.log").symlink_to(theirs / "output.log")
    assert rundirs.checkpoint_epochs(mine, None) == []
    with pytest.raises(Unreadable):
        rundirs.read_output(mine, 0, 1024, None)
