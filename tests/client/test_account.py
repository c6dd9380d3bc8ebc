"""`scalelab login`: a name and password for an API token, kept in the config file for the next commands."""

from __future__ import annotations

import io
import os
import stat
import tomllib
from datetime import datetime, timedelta

import pytest
from sqlmodel import Session, select

from client import cli
from client.config import config_path
from server.models import ApiToken, utcnow
from server.services import users
from tests.client.helpers import scalelab
from tests.conftest import make_client

PASSWORD = "alice's long passphrase"  # noqa: S105 (a test user's)


@pytest.fixture
def server(settings, local_scheduler):
    with make_client(settings, local_scheduler) as client:
        with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
            users.add_user(session, "alice", password=PASSWORD)
        yield client


def test_login_saves_a_token_only_its_owner_can_read_and_the_next_command_uses_it(server, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    code, out, err = scalelab(server, capsys, "login", "--user", "alice", "--password-stdin")
    assert code == cli.EXIT_OK, err
    path = config_path(os.environ)
    assert "as alice" in out and str(path) in out
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    saved = tomllib.loads(path.read_text())
    assert saved["token"].startswith(users.TOKEN_PREFIX)
    # The saved token is alice's: the server knows it as hers.
    with Session(server.app.state.engine) as session:
        user = users.user_of_token(session, users.digest(saved["token"]))
        assert user is not None and user.name == "alice"


def test_a_wrong_password_is_the_token_exit_code_and_saves_nothing(server, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("sys.stdin", io.StringIO("not her password\n"))
    code, _, err = scalelab(server, capsys, "login", "--user", "alice", "--password-stdin")
    assert code == cli.EXIT_TOKEN
    assert "wrong user name or password" in err
    assert not (tmp_path / "config" / "scalelab" / "config.toml").exists()


def test_print_shows_the_token_without_saving_it(server, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    code, out, _ = scalelab(server, capsys, "login", "--user", "alice", "--password-stdin", "--print")
    assert code == cli.EXIT_OK and out.strip().startswith(users.TOKEN_PREFIX)
    assert not (tmp_path / "config" / "scalelab" / "config.toml").exists()


def test_without_a_terminal_or_stdin_flag_it_asks_for_the_flag(server, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, _, err = scalelab(server, capsys, "login", "--user", "alice")
    assert code == cli.EXIT_USAGE and "--password-stdin" in err


def _expiry_of_saved_token(server) -> datetime | None:
    saved = tomllib.loads(config_path(os.environ).read_text())
    with Session(server.app.state.engine) as session:
        token = session.exec(select(ApiToken).where(ApiToken.token_hash == users.digest(saved["token"]))).one()
        return token.expires_at


def test_login_keeps_a_token_that_expires_in_30_days_unless_told_otherwise(server, capsys, monkeypatch):
    for flags, days in (((), 30.0), (("--days", "2"), 2.0), (("--no-expiry",), None)):
        monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
        before = utcnow()
        code, out, err = scalelab(server, capsys, "login", "--user", "alice", "--password-stdin", *flags)
        after = utcnow()
        assert code == cli.EXIT_OK, err
        expires_at = _expiry_of_saved_token(server)
        if days is None:
            assert expires_at is None and "until revoked" in out
        else:
            assert expires_at is not None and f"until {expires_at:%Y-%m-%d %H:%M} UTC" in out
            assert before + timedelta(days=days) <= expires_at <= after + timedelta(days=days)
    code, _, err = scalelab(server, capsys, "login", "--user", "alice", "--password-stdin", "--days", "0")
    assert code == cli.EXIT_USAGE and "--days must be more than 0" in err
