"""scripts/postgres-local: its help, its usage errors, shellcheck, and the cluster it runs for the suites."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from sqlalchemy import create_engine, text

from tests.databases import postgres_or_skip
from tests.factories import ROOT

SCRIPT = ROOT / "scripts" / "postgres-local"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, check=False, timeout=120)


def test_help_names_every_subcommand():
    result = run("--help")
    assert result.returncode == 0, result.stderr
    assert all(word in result.stdout for word in ("up", "down [--purge]", "restart", "status", "url"))


@pytest.mark.parametrize("argv", [[], ["start"], ["up", "--now"], ["down", "--all"]])
def test_a_usage_error_is_exit_2_and_starts_nothing(argv):
    result = run(*argv)
    assert result.returncode == 2, result.stderr
    assert "Usage:" in result.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="scripts/test installs shellcheck")
def test_shellcheck_finds_nothing():
    result = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_up_is_idempotent_and_prints_a_url_scalelab_connects_with():
    postgres_or_skip()
    if os.geteuid() != 0:
        pytest.skip("scripts/postgres-local up runs as root")
    first, again = run("up"), run("up")
    assert (first.returncode, again.returncode) == (0, 0), first.stderr + again.stderr
    url = first.stdout.strip()
    assert url == again.stdout.strip() and url.startswith("postgresql+psycopg://scalelab:")
    engine = create_engine(url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT current_user")).scalar_one() == "scalelab"
    engine.dispose()
    assert run("status").returncode == 0
