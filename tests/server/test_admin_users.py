"""`python -m server users ...` on a real database, and what `python -m server` does at its first start."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from benches.server_process import running_server
from tests.conftest import bearer

TOKEN = re.compile(r"sl_[A-Za-z0-9_-]{40,}")


def server_command(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SCALELAB_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "SCALELAB_RUNS_DIR": str(tmp_path),
    }
    return subprocess.run(
        [sys.executable, "-m", "server", *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
    )


def test_users_are_added_listed_changed_and_revoked(tmp_path):
    added = server_command(tmp_path, "users", "add", "alice", "--slurm-account", "proj1", "--max-runs-per-day", "5")
    assert added.returncode == 0, added.stderr
    assert len(TOKEN.findall(added.stdout)) == 1
    assert (
        server_command(tmp_path, "users", "add", "root", "--admin", "--password", stdin="long enough pass\n").returncode
        == 0
    )
    changed = server_command(tmp_path, "users", "set", "alice", "--max-gpus-in-use", "8", "--max-runs-per-day", "-1")
    assert changed.returncode == 0, changed.stderr
    listing = server_command(tmp_path, "users", "list").stdout.splitlines()
    assert re.match(r"alice\s+user\s+proj1\s+-\s+8\s+-\s+active", listing[1]), listing
    assert re.match(r"root\s+admin\s+-", listing[2]), listing
    assert TOKEN.fullmatch(server_command(tmp_path, "users", "token", "alice").stdout.strip())
    assert server_command(tmp_path, "users", "revoke", "alice").returncode == 0
    assert "revoked 20" in server_command(tmp_path, "users", "list").stdout


def test_users_refuses_what_cannot_be(tmp_path):
    assert server_command(tmp_path, "users", "add", "alice").returncode == 0
    for args, message in [
        (("add", "alice"), "exists already"),
        (("add", "Bad Name"), "user name 'Bad Name'"),
        (("add", "bob", "--slurm-account", "a;b"), "Slurm account 'a;b'"),
        (("add", "carl", "--password"), "at least 10 characters"),
        (("revoke", "nobody"), "no user 'nobody'"),
    ]:
        result = server_command(tmp_path, "users", *args, stdin="short\n")
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


def test_every_command_has_help(tmp_path):
    for args in (
        (),
        ("users",),
        *(("users", command) for command in ("add", "set", "list", "revoke", "tokens", "unlock")),
    ):
        result = server_command(tmp_path, *args, "--help")
        assert result.returncode == 0 and "usage: python -m server" in result.stdout, args


def test_without_authentication_only_loopback_is_served(tmp_path):
    env_off = {"SCALELAB_AUTH": "false"}
    result = subprocess.run(
        [sys.executable, "-m", "server", "--host", "0.0.0.0", "--port", "1"],  # noqa: S104 (refused before binding)
        capture_output=True,
        text=True,
        env={**os.environ, **env_off, "SCALELAB_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}"},
        timeout=60,
    )
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0 with SCALELAB_AUTH=false" in result.stderr


def test_the_first_start_prints_an_admin_token_once(tmp_path):
    with running_server(tmp_path, "local", {"SCALELAB_AUTH": "true"}) as url:
        tokens = TOKEN.findall((tmp_path / "server.log").read_text())
        assert len(tokens) == 1
        assert httpx.get(f"{url}/api/runs", timeout=10).status_code == 401
        assert httpx.get(f"{url}/api/runs", headers=bearer(tokens[0]), timeout=10).status_code == 200
    with running_server(tmp_path, "local", {"SCALELAB_AUTH": "true"}):
        assert TOKEN.findall((tmp_path / "server.log").read_text()) == tokens  # not again


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is of root")
@pytest.mark.parametrize("setting", [{"SCALELAB_SIGNIN": "pam"}, {"SCALELAB_SCHEDULER": "slurmrestd"}])
def test_a_shared_instance_refuses_to_run_as_root(tmp_path, setting):
    result = subprocess.run(
        [sys.executable, "-m", "server", "--port", "1"],
        capture_output=True,
        text=True,
        env={**os.environ, **setting, "SCALELAB_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}"},
        timeout=60,
    )
    assert result.returncode == 2
    assert "refusing to serve a shared instance" in result.stderr and "as root" in result.stderr


def test_an_admin_sees_each_tokens_expiry_and_maker_and_unlocks_a_name(tmp_path):
    assert server_command(tmp_path, "users", "add", "alice").returncode == 0
    assert TOKEN.fullmatch(server_command(tmp_path, "users", "token", "alice", "--days", "3").stdout.strip())
    listing = server_command(tmp_path, "users", "tokens", "alice").stdout.splitlines()
    assert listing[0].split()[:4] == ["id", "made", "last", "used"], listing
    first, second = listing[1], listing[2]
    assert re.search(r"\s-\s+-\s+active$", first), first  # no expiry, no maker
    assert re.search(r"\s\d{4}-\d\d-\d\d \d\d:\d\d\s+-\s+active$", second), second
    assert server_command(tmp_path, "users", "token", "alice", "--days", "0").returncode == 2
    assert "no user 'bob'" in server_command(tmp_path, "users", "tokens", "bob").stderr
    assert server_command(tmp_path, "users", "unlock", "alice").stdout.strip() == "alice was not locked out"
    assert server_command(tmp_path, "users", "revoke", "alice").returncode == 0
    assert all(
        "revoked" in line for line in server_command(tmp_path, "users", "tokens", "alice").stdout.splitlines()[1:]
    )
