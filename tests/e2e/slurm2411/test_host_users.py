"""The login node's users on the 24.11 cluster (issue 20): the host's users are known in its containers.

A centre's LDAP makes a user known on the login node and on every compute node at once; here the host is the
login node, and the image's NSS reads the host's passwd and group after its own (libnss-extrausers over a
read-only mount of the host's /etc, see containers/slurm2411/Containerfile). So a user the host adds after `up`
resolves in every container at once, and the containers' own system users keep their ids.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.slurm2411.cluster import CONTAINERS, in_container

pytestmark = [pytest.mark.slurm2411, pytest.mark.container]


def test_a_user_the_host_adds_after_up_resolves_by_name_and_uid_in_every_container(host_user):
    entry = pwd.getpwnam(host_user)
    line = f"{host_user}:x:{entry.pw_uid}:{entry.pw_gid}::{entry.pw_dir}:{entry.pw_shell}"
    for container in CONTAINERS:
        assert in_container(container, "getent", "passwd", host_user).stdout.strip() == line, container
        assert in_container(container, "getent", "passwd", str(entry.pw_uid)).stdout.strip() == line, container
        group = in_container(container, "getent", "group", str(entry.pw_gid)).stdout.strip()
        assert group.startswith(f"{host_user}:x:{entry.pw_gid}:"), (container, group)


def test_the_containers_own_system_users_are_not_the_hosts(cluster_path):
    """munge, slurm and mysql own the containers' keys, state and database: their ids stay the image's, also
    where the host has a user of the same name with another id (the host's munge is not the image's)."""
    for container in CONTAINERS:
        for name in ("root", "munge", "slurm", "mysql"):
            own = in_container(container, "grep", f"^{name}:", "/etc/passwd").stdout.strip()
            assert own, (container, name)
            assert in_container(container, "getent", "passwd", name).stdout.strip() == own, (container, name)
        # and the daemons that run as them still work: munge credentials decode
        munge = in_container(container, "sh", "-c", "munge -n | unmunge")
        assert munge.returncode == 0 and "STATUS:          Success" in munge.stdout, (container, munge)


def test_slurm_runs_a_job_of_a_user_the_host_added_as_that_uid(cluster_path, work, host_user):
    entry = pwd.getpwnam(host_user)
    mine = work / host_user
    mine.mkdir()
    os.chown(mine, entry.pw_uid, entry.pw_gid)
    env = {**os.environ, "PATH": cluster_path}
    submitted = subprocess.run(
        # (root submits for the user: --uid alone would keep root's group)
        ["sbatch", "--parsable", f"--uid={host_user}", f"--gid={entry.pw_gid}", "-N2", f"--chdir={mine}",
         f"--output={mine}/%j.out", "--wrap", "srun sh -c 'echo $(hostname) $(id -u) $(id -un) $(id -g)'"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    output = mine / f"{job}.out"
    deadline = time.monotonic() + 60
    while len(output.read_text().splitlines() if output.exists() else []) < 2:
        assert time.monotonic() < deadline, f"job {job} wrote no output"
        time.sleep(0.5)
    lines = sorted(output.read_text().splitlines())
    assert lines == [f"s24n{n} {entry.pw_uid} {host_user} {entry.pw_gid}" for n in (1, 2)], lines
    assert Path(output).stat().st_uid == entry.pw_uid


# ---- the host's wrappers as a login node's Slurm commands: each user as themselves ------------------------------


def as_user(user: str, path: str, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    variables = [f"{name}={value}" for name, value in {"PATH": path, **env}.items()]
    return subprocess.run(
        ["runuser", "-u", user, "--", "env", "-i", *variables, *argv],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def wait_for_output(output: Path, lines: int = 1, timeout_s: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while len(output.read_text().splitlines() if output.exists() else []) < lines:
        assert time.monotonic() < deadline, f"no output in {output}"
        time.sleep(0.3)
    return output.read_text().splitlines()


@pytest.fixture
def users_directory(work: Path, host_user: str) -> Path:
    entry = pwd.getpwnam(host_user)
    mine = work / host_user
    mine.mkdir()
    os.chown(mine, entry.pw_uid, entry.pw_gid)
    return mine


def test_a_user_submits_through_the_wrappers_and_the_job_runs_as_them(cluster_path, host_user, users_directory):
    entry = pwd.getpwnam(host_user)
    submitted = as_user(
        host_user, cluster_path, "sh", "-c", f"cd {users_directory} && exec sbatch --parsable --wrap \"$0\"",
        "echo $(id -u) $(id -g) $(id -un) $SCALELAB_PROBE", SCALELAB_PROBE="from-the-login-node",
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    queue = as_user(host_user, cluster_path, "squeue", "--noheader", "--states=all", "-j", job, "-o", "%i|%u")
    assert queue.stdout.split() == [f"{job}|{host_user}"], queue
    # the job ran in the directory sbatch was called from, as the caller, with the caller's environment
    output = users_directory / f"slurm-{job}.out"
    assert wait_for_output(output) == [f"{entry.pw_uid} {entry.pw_gid} {host_user} from-the-login-node"]
    assert output.stat().st_uid == entry.pw_uid


def test_a_user_gets_no_other_uid_and_no_other_command(cluster_path, host_user, users_directory):
    helper = Path(cluster_path.split(os.pathsep)[0]).parent / "libexec" / "slurm-as-caller"
    assert helper.stat().st_uid == 0 and helper.stat().st_mode & 0o022 == 0

    def through_sudo(*argv: str) -> subprocess.CompletedProcess[str]:
        return as_user(host_user, cluster_path, "sudo", "--non-interactive", *argv)

    # sudo runs the helper and nothing else, and keeps the caller's identity from them
    assert "a password is required" in through_sudo("/bin/sh", "-c", "id").stderr
    refused = through_sudo("SUDO_UID=0", str(helper), "squeue", "/", "--")
    assert refused.returncode != 0 and "not allowed to set" in refused.stderr, refused
    # the helper runs the cluster's Slurm commands only, and takes NAME=VALUE words only before its --
    for argv in (["id", "/", "--"], ["sh", "/", "--", "-c", "id"], ["../../bin/sh", "/", "--"]):
        refused = through_sudo(str(helper), *argv)
        assert refused.returncode == 2 and "not a Slurm command" in refused.stderr, (argv, refused)
    refused = through_sudo(str(helper), "sbatch", "/", "--user=0", "--", "--version")
    assert refused.returncode == 2 and "not an environment variable" in refused.stderr, refused
    # Slurm itself refuses another uid to a user
    other = as_user(host_user, cluster_path, "sbatch", "--uid=0", "--wrap", "id")
    assert other.returncode != 0 and "--uid only permitted by root" in other.stderr, other
    drain = as_user(host_user, cluster_path, "scontrol", "update", "nodename=s24n1", "state=drain", "reason=x")
    assert drain.returncode != 0, drain
    # the dynamic loader's variables stay behind; a word with shell syntax reaches the command as it is
    name = "$(touch /tmp/s24-pwned);`id`"
    submitted = through_sudo(
        str(helper), "sbatch", str(users_directory), "LD_PRELOAD=/nonexistent.so", "SCALELAB_PROBE=kept", "--",
        "--parsable", f"--job-name={name}", "--wrap", "echo ${LD_PRELOAD-no-preload} $SCALELAB_PROBE",
    )  # fmt: skip
    assert submitted.returncode == 0, submitted
    job = submitted.stdout.strip()
    queue = as_user(host_user, cluster_path, "squeue", "--noheader", "--states=all", "-j", job, "-o", "%j")
    assert queue.stdout.strip() == name, queue
    assert wait_for_output(users_directory / f"slurm-{job}.out") == ["no-preload kept"]


def test_the_helper_and_the_wrappers_up_writes_pass_shellcheck(cluster_path):
    if shutil.which("shellcheck") is None:
        pytest.skip("no shellcheck")
    bin_dir = Path(cluster_path.split(os.pathsep)[0])
    scripts = [bin_dir.parent / "libexec" / "slurm-as-caller", *sorted(bin_dir.iterdir())]
    checked = subprocess.run(["shellcheck", *map(str, scripts)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout
