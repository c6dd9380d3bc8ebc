"""The slurmrestd backend against the real local Slurm and slurmrestd, with real Unix users the tests create.

The service side runs in this process (as root here); each job runs as the user it was submitted for, with a
token from the real helper (scripts/scalelab-slurm-token, installed by `token-helper`).

Which slurmrestd: the host's (Slurm 22.05, scripts/slurm-local) by default; with
SCALELAB_TEST_SLURMRESTD_SOCKET set to the socket of the 24.11 cluster's (scripts/slurm-containers up prints
it; run with its SCALELAB_SLURM2411_* settings, its wrappers first on PATH and TMPDIR in its shared directory,
where its nodes see the jobs' directories), the same tests run there.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from contract.states import RunState
from server.scheduler import Job, SchedulerError, SchedulerUnavailable
from server.scheduler.slurmrestd import API_VERSIONS, SlurmrestdScheduler, offered_versions
from server.scheduler.tokens import Tokens, run_token_command
from tests.factories import wait_final

pytestmark = pytest.mark.slurm

REPO = Path(__file__).parents[3]
HOST_SOCKET = "/run/scalelab-slurmrestd/slurmrestd.socket"
SOCKET = Path(os.environ.get("SCALELAB_TEST_SLURMRESTD_SOCKET") or HOST_SOCKET)
URL = f"unix:{SOCKET}"
ON_HOST = str(SOCKET) == HOST_SOCKET
# Whose token helper: the host cluster's (slurm-local) or the containers' (slurm-containers, which prints its path).
INSTALLER = REPO / "scripts" / ("slurm-local" if ON_HOST else "slurm-containers")
# The names scripts/shared-instance uses too: installing the helper again for them changes nothing there.
SERVICE_USER = "scalelab"
USERS_GROUP = "scalelab-users"
# Users of this test: two in the group, one outside it.
ANN, BO, OUTSIDER = "restd-ann", "restd-bo", "restd-out"


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def _ensure_user(name: str, groups: Sequence[str] = ()) -> None:
    if _run("id", "-u", name).returncode != 0:
        _run("useradd", "-m", *(["-G", ",".join(groups)] if groups else []), name)
    for group in groups:
        _run("usermod", "-a", "-G", group, name)
    pwd.getpwnam(name)  # made, by this run or another at the same time


@pytest.fixture(scope="module")
def users(slurm: None) -> Path:
    """The users, the group and the helper installed (its path); skip without root or slurmrestd."""
    if os.geteuid() != 0:
        pytest.skip("creating Unix users and installing the token helper needs root")
    if not SOCKET.is_socket():
        pytest.skip(f"slurmrestd is not listening on {SOCKET}: run scripts/slurm-local up")
    if _run("getent", "group", USERS_GROUP).returncode != 0:
        _run("groupadd", USERS_GROUP)
    if _run("id", "-u", SERVICE_USER).returncode != 0:
        _run("useradd", "--system", "--user-group", "--create-home", "--home-dir", f"/var/lib/{SERVICE_USER}",
             "--shell", "/usr/sbin/nologin", SERVICE_USER)  # fmt: skip
    _ensure_user(ANN, [USERS_GROUP])
    _ensure_user(BO, [USERS_GROUP])
    _ensure_user(OUTSIDER)
    installed = _run(str(INSTALLER), "token-helper", SERVICE_USER, USERS_GROUP)
    assert installed.returncode == 0, installed.stderr
    return Path("/usr/local/sbin/scalelab-slurm-token") if ON_HOST else Path(installed.stdout.split()[-1])


@pytest.fixture(scope="module")
def helper(users: Path) -> Path:
    return users


@pytest.fixture
def scheduler(helper: Path) -> SlurmrestdScheduler:
    # As root the helper runs without sudo; the sudo rule itself is tested below.
    return SlurmrestdScheduler(URL, Tokens([str(helper)], 600))


@pytest.fixture
def runs_dir() -> Iterator[Path]:
    """A directory every user may make a run's directory in (as the service's runs directory lets them)."""
    path = Path(tempfile.mkdtemp(prefix="scalelab-restd-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def script(runs_dir: Path, name: str, body: str, *directives: str) -> tuple[Path, Path]:
    """A batch script that makes its run's directory itself, as the job's user, and runs `body` there."""
    run_dir = runs_dir / name
    path = runs_dir / f"{name}.sbatch"
    lines = [
        "#!/bin/bash", f"#SBATCH --job-name=scalelab-{name}", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --time=00:05:00", "#SBATCH --output=/dev/null", "#SBATCH --open-mode=append",
        *(f"#SBATCH {directive}" for directive in directives),
        f"mkdir -p {run_dir} && cd {run_dir}", body,
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path, run_dir


def wait_running(scheduler: SlurmrestdScheduler, job_id: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while (status := scheduler.poll([Job(job_id)]).get(Job(job_id))) is None or status.state is not RunState.running:
        assert time.monotonic() < deadline, f"job {job_id} did not start: {status}"
        time.sleep(0.3)


def sacct_user(job_id: str, name: str, timeout_s: float = 30) -> str:
    """The user slurmdbd recorded for the job; by its name too, since job ids start again after a controller's
    state is wiped and slurmdbd keeps the older job of the same id."""
    deadline = time.monotonic() + timeout_s
    while True:
        said = _run("sacct", "-n", "-P", "-X", f"--jobs={job_id}", f"--name={name}", "--format=User").stdout.strip()
        if said or time.monotonic() > deadline:
            return said
        time.sleep(0.3)


# ---- jobs run as their users ---------------------------------------------------------------------------------------


def test_a_job_runs_as_its_user_and_is_followed_to_its_end(scheduler, runs_dir):
    # Long enough to be seen running by a poll on a loaded machine.
    path, run_dir = script(runs_dir, "asann", "id -u >uid; umask >umask; sleep 5", "--mem=100M")
    job_id = scheduler.submit(path, run_dir, ANN)
    seen = set()
    deadline = time.monotonic() + 240  # the cluster may be busy with others' tests
    while not (status := scheduler.poll([Job(job_id)])[Job(job_id)]).state.is_final:
        seen.add(status.state)
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert seen <= {RunState.pending, RunState.running} and RunState.running in seen, seen
    assert (status.state, status.exit_code) == (RunState.completed, "0:0")
    assert status.nodes in _run("sinfo", "-h", "-N", "-o", "%N").stdout.split()
    # The controller's listing names the job and its submission: another job of that id is not taken for it.
    assert (status.name, status.submitted is not None) == ("scalelab-asann", True)
    assert list(scheduler.poll([Job(job_id, "scalelab-asann"), Job(job_id, "scalelab-another")])) == [
        Job(job_id, "scalelab-asann")
    ]
    ann = pwd.getpwnam(ANN)
    assert (run_dir / "uid").read_text().strip() == str(ann.pw_uid)
    assert (run_dir.stat().st_uid, (run_dir / "uid").stat().st_uid) == (ann.pw_uid, ann.pw_uid)
    assert (run_dir / "umask").read_text().strip() == "0027"  # SLURM_UMASK, as sbatch would pass it
    assert sacct_user(job_id, "scalelab-asann") == ANN
    assert scheduler.jobs_of(["asann", "nosuchrun"]) == {"asann": job_id}


def test_a_failed_job_has_its_exit_code(scheduler, runs_dir):
    path, run_dir = script(runs_dir, "fails", "exit 3")
    job_id = scheduler.submit(path, run_dir, BO)
    status = wait_final(scheduler, [job_id])[job_id]
    assert (status.state, status.exit_code) == (RunState.failed, "3:0")


def test_every_api_version_slurmrestd_offers_runs_and_reads_a_job(helper, scheduler, runs_dir):
    offered = [version for version in API_VERSIONS if version in offered_versions(_openapi_paths(scheduler))]
    assert offered and scheduler.version == offered[0]
    for version in offered:
        pinned = SlurmrestdScheduler(URL, Tokens([str(helper)], 600), version=version)
        path, run_dir = script(runs_dir, f"api-{version}", "exit 7")
        job_id = pinned.submit(path, run_dir, BO)
        status = wait_final(pinned, [job_id])[job_id]
        assert (status.state, status.exit_code, status.name) == (RunState.failed, "7:0", f"scalelab-api-{version}")


def _openapi_paths(scheduler: SlurmrestdScheduler) -> list[str]:
    token = run_token_command(["scontrol", "token", "lifespan=60"]).stdout.strip().removeprefix("SLURM_JWT=")
    headers = {"X-SLURM-USER-NAME": pwd.getpwuid(os.geteuid()).pw_name, "X-SLURM-USER-TOKEN": token}
    transport = httpx.HTTPTransport(uds=str(SOCKET))
    with httpx.Client(transport=transport, base_url="http://localhost", timeout=30) as client:
        return list(client.get("/openapi/v3", headers=headers).json()["paths"])


def test_the_options_scalelab_renders_reach_slurm_as_sbatch_would_pass_them(scheduler, runs_dir):
    # Held, so it never runs: what slurmctld made of each option is read back with scontrol.
    path, run_dir = script(
        runs_dir, "options", "true", "--hold", "--time=00:07:30", "--mem=150M", "--exclusive", "--requeue",
        "--nice=10", "--cpus-per-task=2", "--signal=USR1@30", "--comment=scalelab",
    )  # fmt: skip
    job_id = scheduler.submit(path, run_dir, ANN)
    try:
        shown = _run("scontrol", "show", "job", "-o", job_id).stdout
        fields = dict(item.split("=", 1) for item in shown.split() if "=" in item)
        assert {key: fields.get(key) for key in ("JobState", "Reason", "TimeLimit", "MinMemoryNode", "OverSubscribe",
                                                 "Requeue", "Nice", "CPUs/Task", "Comment")} == {
            "JobState": "PENDING", "Reason": "JobHeldUser", "TimeLimit": "00:08:00", "MinMemoryNode": "150M",
            "OverSubscribe": "NO", "Requeue": "1", "Nice": "10", "CPUs/Task": "2", "Comment": "scalelab",
        }, shown  # fmt: skip
        # --time rounds up to whole minutes, as sbatch does
    finally:
        _run("scancel", job_id)


def test_jobs_the_controller_forgot_come_from_the_accounting_database(scheduler):
    # An id above Slurm's MaxJobId was never a job: sacct is asked, and says nothing.
    assert scheduler.poll([Job("67100000")]) == {}


def test_only_the_owner_cancels_a_job(scheduler, runs_dir):
    path, run_dir = script(runs_dir, "cancelme", "sleep 120")
    job_id = scheduler.submit(path, run_dir, ANN)
    try:
        wait_running(scheduler, job_id)
        with pytest.raises(SchedulerError, match=f"as {BO}: Access/permission denied") as refused:
            scheduler.cancel(job_id, BO)
        assert not isinstance(refused.value, SchedulerUnavailable)
        assert scheduler.poll([Job(job_id)])[Job(job_id)].state is RunState.running
        scheduler.cancel(job_id, ANN)
        status = wait_final(scheduler, [job_id])[job_id]
        assert (status.state, status.exit_code) == (RunState.cancelled, "0:15")
    finally:
        _run("scancel", job_id)


def test_a_signal_reaches_the_jobs_task_as_its_owner(scheduler, runs_dir):
    """The hang watchdog's SIGUSR2: to the step's task (which notes it and runs on), not to the batch shell. The
    oldest API (22.05's) signals the batch shell too: there it is refused, and the job runs on."""
    body = "srun bash -c 'trap \"echo usr2 > got\" USR2; touch ready; while true; do sleep 0.2; done'"
    path, run_dir = script(runs_dir, "signalme", body)
    job_id = scheduler.submit(path, run_dir, ANN)
    try:
        deadline = time.monotonic() + 90
        while not (run_dir / "ready").exists():
            assert time.monotonic() < deadline, "the task did not start"
            time.sleep(0.3)
        if scheduler.version == "v0.0.38":
            with pytest.raises(SchedulerError, match="without its batch script"):
                scheduler.signal(job_id, "USR2", ANN)
        else:
            with pytest.raises(SchedulerError, match=f"as {BO}"):
                scheduler.signal(job_id, "USR2", BO)
            scheduler.signal(job_id, "USR2", ANN)
            while not (run_dir / "got").exists():
                assert time.monotonic() < deadline, "the task was not signalled"
                time.sleep(0.3)
        assert scheduler.poll([Job(job_id)])[Job(job_id)].state is RunState.running
    finally:
        _run("scancel", job_id)


def test_a_run_without_an_owner_is_refused(scheduler, runs_dir):
    path, run_dir = script(runs_dir, "nobody", "true")
    with pytest.raises(SchedulerError, match="no owner"):
        scheduler.submit(path, run_dir, None)
    with pytest.raises(SchedulerError, match="no owner"):
        scheduler.cancel("1", None)


def test_a_job_slurm_refuses_says_why_and_names_the_user(scheduler, runs_dir):
    path, run_dir = script(runs_dir, "toobig", "true", "--ntasks=64")
    with pytest.raises(SchedulerError, match=f"refused the job of {ANN}: .*") as refused:
        scheduler.submit(path, run_dir, ANN)
    assert not isinstance(refused.value, SchedulerUnavailable)


def test_a_user_outside_the_group_gets_no_job(scheduler, runs_dir):
    path, run_dir = script(runs_dir, "outsider", "true")
    with pytest.raises(SchedulerError, match=f"{OUTSIDER} is not a member of the group {USERS_GROUP}"):
        scheduler.submit(path, run_dir, OUTSIDER)


# ---- tokens --------------------------------------------------------------------------------------------------------


class CountingMint:
    """The real token commands, except that the first token minted for `whose` (the service's, or ANN's) is
    garbage, as an expired one would be; counts `whose` mints only."""

    def __init__(self, whose: str) -> None:
        self.whose = whose
        self.calls = 0

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        if (argv[0] == "scontrol") if self.whose == "service" else (ANN in argv):
            self.calls += 1
            if self.calls == 1:
                return subprocess.CompletedProcess(argv, 0, "SLURM_JWT=garbage.garbage.garbage\n", "")
        return run_token_command(argv)


@pytest.mark.parametrize("whose", ["service", "user"])
def test_a_refused_token_is_minted_again_once(helper, runs_dir, whose):
    mint = CountingMint(whose)
    scheduler = SlurmrestdScheduler(URL, Tokens([str(helper)], 600, run=mint))
    if whose == "service":
        scheduler.ping()
    else:
        path, run_dir = script(runs_dir, "remint", "true")
        job_id = scheduler.submit(path, run_dir, ANN)
        _run("scancel", job_id)
    assert mint.calls == 2


def test_the_service_account_mints_through_sudo_only_the_helper(helper):
    minted = _run("runuser", "-u", SERVICE_USER, "--", "sudo", "-n", str(helper), ANN, "60")
    assert minted.returncode == 0, minted.stderr
    assert minted.stdout.startswith("SLURM_JWT=") and minted.stdout.count("\n") == 1
    other = _run("runuser", "-u", SERVICE_USER, "--", "sudo", "-n", "scontrol", "token", f"username={ANN}")
    assert other.returncode != 0 and "SLURM_JWT" not in other.stdout
    assert (helper.stat().st_uid, helper.stat().st_mode & 0o7777) == (0, 0o755)
    rules = [path for path in Path("/etc/sudoers.d").iterdir() if f" NOPASSWD: {helper}\n" in path.read_text()]
    assert rules and all((rule.stat().st_uid, rule.stat().st_mode & 0o7777) == (0, 0o440) for rule in rules)


@pytest.mark.parametrize(
    ("user", "lifespan", "why"),
    [
        ("root", "600", "below UID_MIN"),
        ("daemon", "600", "below UID_MIN"),
        (OUTSIDER, "600", f"not a member of the group {USERS_GROUP}"),
        ("restd-nobody-such", "600", "no such user"),
        ("Root;id", "600", "bad user name"),
        ("-n", "600", "bad user name"),
        (ANN, "59", "LIFESPAN must be"),
        (ANN, "3601", "LIFESPAN must be"),
        (ANN, "6e2", "LIFESPAN must be"),
        (ANN, "", "LIFESPAN must be"),
    ],
)
def test_the_helper_refuses(helper, user, lifespan, why):
    result = _run(str(helper), user, lifespan)
    assert result.returncode == 2 and result.stdout == "", result
    assert why in result.stderr


def test_the_helper_refuses_everyone_without_its_group(helper, tmp_path):
    # A copy reading another configuration: none at all, or one naming a group that does not exist.
    conf = tmp_path / "slurm-token.conf"
    copy = tmp_path / "helper"
    copy.write_text(re.sub(r"(?m)^CONF=.*$", f"CONF={conf}", helper.read_text()))
    copy.chmod(0o755)
    helper = copy
    result = _run(str(helper), ANN, "600")
    assert result.returncode == 2 and "does not exist: no group is allowed tokens" in result.stderr
    conf.write_text("ALLOWED_GROUP=restd-no-such-group\n")
    result = _run(str(helper), ANN, "600")
    assert result.returncode == 2 and "the group restd-no-such-group" in result.stderr
    conf.write_text("# nothing\n")
    result = _run(str(helper), ANN, "600")
    assert result.returncode == 2 and "sets no ALLOWED_GROUP" in result.stderr
    # SCONTROL (the cluster's scontrol) must name an executable by its absolute path: never one found on PATH
    conf.write_text(f"ALLOWED_GROUP={USERS_GROUP}\nSCONTROL=scontrol\n")
    result = _run(str(helper), ANN, "600")
    assert result.returncode == 2 and "SCONTROL 'scontrol' is not an executable absolute path" in result.stderr
    assert grp.getgrnam(USERS_GROUP)


# ---- slurmrestd itself ---------------------------------------------------------------------------------------------


def _socket_inode(pid: int) -> str | None:
    """The inode of the unix socket listening at SOCKET, as the process's own network namespace lists it (the
    24.11 one runs in a container, whose directory the host mounts at the same path)."""
    try:
        table = Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]
    except OSError:
        return None
    return next((fields[6] for line in table if len(fields := line.split()) == 8 and fields[7] == str(SOCKET)), None)


def _restd() -> tuple[int, str]:
    """slurmrestd's pid (in the host's view) and its listening socket's inode."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        # the 24.11 cluster's daemons run under names of their own (s24-slurmrestd)
        if comm.endswith("slurmrestd") and (inode := _socket_inode(int(entry.name))) is not None:
            fds = {os.readlink(fd) for fd in (entry / "fd").iterdir()}
            if f"socket:[{inode}]" in fds:
                return int(entry.name), inode
    raise AssertionError(f"no slurmrestd process listens on {SOCKET}")


def _listening_inodes(table: str) -> set[str]:
    inodes = set()
    for line in Path(table).read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A":  # TCP_LISTEN
            inodes.add(fields[9])
    return inodes


def test_slurmrestd_listens_on_its_socket_only_and_not_as_root(users):
    pid, _ = _restd()
    status = Path(f"/proc/{pid}/status").read_text()
    uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    assert "0" not in uids
    if ON_HOST:  # the container's user is its own, not a name of the host's
        assert pwd.getpwuid(int(uids[0])).pw_name == "slurmrestd"
    own = {os.readlink(fd).removeprefix("socket:[").removesuffix("]") for fd in Path(f"/proc/{pid}/fd").iterdir()
           if os.readlink(fd).startswith("socket:")}  # fmt: skip
    tcp = _listening_inodes(f"/proc/{pid}/net/tcp") | _listening_inodes(f"/proc/{pid}/net/tcp6")
    assert not own & tcp, "slurmrestd listens on TCP"


def test_slurmrestd_unreachable_is_unavailable(helper, tmp_path):
    tokens = Tokens([str(helper)], 600)
    missing = SlurmrestdScheduler(f"unix:{tmp_path / 'missing.socket'}", tokens)
    with pytest.raises(SchedulerUnavailable, match="cannot be reached"):
        missing.ping()
    with pytest.raises(SchedulerUnavailable):
        missing.poll([Job("1")])
    # A socket nobody accepts on: connection refused.
    dead = tmp_path / "dead.socket"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(dead))
    try:
        refused = SlurmrestdScheduler(f"unix:{dead}", tokens)
        path = tmp_path / "job.sbatch"
        path.write_text("#!/bin/bash\n#SBATCH --output=/dev/null\ntrue\n")
        with pytest.raises(SchedulerUnavailable):
            refused.submit(path, tmp_path / "run", ANN)
        with pytest.raises(SchedulerUnavailable):
            refused.cancel("1", ANN)
    finally:
        sock.close()
