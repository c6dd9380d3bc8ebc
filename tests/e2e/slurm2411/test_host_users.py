"""The login node's users on the 24.11 cluster (issue 20): the host's users are known in its containers.

A centre's LDAP makes a user known on the login node and on every compute node at once; here the host is the
login node, and the image's NSS reads the host's passwd and group after its own (libnss-extrausers over a
read-only mount of the host's /etc, see containers/slurm2411/Containerfile). So a user the host adds after `up`
resolves in every container at once, and the containers' own system users keep their ids.
"""

from __future__ import annotations

import os
import pwd
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
        ["sbatch", "--parsable", f"--uid={host_user}", f"--gid={entry.pw_gid}", "-N2", f"--chdir={mine}", f"--output={mine}/%j.out",
         "--wrap", "srun sh -c 'echo $(hostname) $(id -u) $(id -un) $(id -g)'"],
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
