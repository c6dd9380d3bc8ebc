"""The scalelab command's wiring: --help on every command, where the server and token come from, exit codes."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from client import cli
from tests.factories import ROOT

# ---- help --------------------------------------------------------------------------------------------------------


COMMANDS = ["submit", "ls", "show", "logs", "watch", "cancel", "export", "import"]
COMMANDS += ["profiles", "resubmit", "rerun", "clone", "events", "report", "scaling", "login", "share", "program"]
COMMANDS += ["reference", "regression", "card", "fabric", "notify", "plan"]


@pytest.mark.parametrize("argv", [[], *([command] for command in COMMANDS)])
def test_help_everywhere_documents_the_exit_codes(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: scalelab")
    assert "exit codes:" in out and "3  the server cannot be reached" in out


def test_help_lists_every_command_once():
    assert sorted(cli.HELP_ORDER) == sorted(cli.COMMANDS) == sorted(COMMANDS)


NEW_COMMANDS = ["profiles", "resubmit", "clone", "events", "program", "reference", "regression", "notify"]


@pytest.mark.parametrize("command", [*NEW_COMMANDS, "submit"])
def test_new_commands_show_examples_and_exit_codes(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    examples = out[out.index("examples:") :]
    assert f"  scalelab {command} " in examples
    assert "409" in out and "503" in out  # the exit codes name what resubmitting can meet


@pytest.mark.parametrize("command", [*NEW_COMMANDS, "submit", "import"])
def test_help_descriptions_are_wrapped_to_the_terminal(capsys, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    description = capsys.readouterr().out.split("\n\n")[1]
    assert len(description.splitlines()) > 1
    assert all(len(line) <= 78 for line in description.splitlines()), description


def test_the_installed_command_runs():
    command = ROOT / ".venv" / "bin" / "scalelab"
    path = command if command.exists() else "scalelab"
    result = subprocess.run([str(path), "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "import" in result.stdout


def test_a_usage_error_is_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["ls", "--state", "sleeping"])
    assert exit_.value.code == cli.EXIT_USAGE
    assert "invalid choice: 'sleeping'" in capsys.readouterr().err


def test_the_command_never_imports_torch():
    code = "import sys, client.cli\nassert 'torch' not in sys.modules\n"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ---- connection --------------------------------------------------------------------------------------------------


def test_flags_beat_the_environment_which_beats_the_config_file(tmp_path, monkeypatch):
    config = tmp_path / "xdg" / "scalelab" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('url = "http://from-file:1"\ntoken = "file-token"\n')
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    nothing = argparse.Namespace()
    assert cli.connection(nothing, environ) == cli.Connection("http://from-file:1", "file-token")
    environ |= {"SCALELAB_URL": "http://from-env:2", "SCALELAB_TOKEN": "env-token"}
    assert cli.connection(nothing, environ) == cli.Connection("http://from-env:2", "env-token")
    flags = argparse.Namespace(url="http://from-flag:3", token="flag-token")  # noqa: S106  (not a secret)
    assert cli.connection(flags, environ) == cli.Connection("http://from-flag:3", "flag-token")
    assert cli.connection(nothing, {"XDG_CONFIG_HOME": str(tmp_path / "none")}) == cli.Connection(
        "http://127.0.0.1:8000", None
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("url = http://x\n", "cannot read the config file"),
        ('server = "x"\n', "unknown keys server"),
        ("token = 5\n", "token must be a quoted string"),
    ],
)
def test_a_broken_config_file_is_a_usage_error(tmp_path, monkeypatch, capsys, text, message):
    config = tmp_path / "config" / "scalelab" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(text)
    assert cli.main(["ls"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert str(config) in err and message in err
