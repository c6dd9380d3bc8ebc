"""The container scripts: --help, usage errors, and shellcheck."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib

import pytest

from tests.factories import ROOT

SCRIPTS = [
    ROOT / "containers" / "build",
    ROOT / "containers" / "export-squashfs",
    ROOT / "containers" / "slurm" / "entrypoint",
    ROOT / "containers" / "slurm2411" / "entrypoint",
    ROOT / "scripts" / "slurm-containers",
    ROOT / "scripts" / "test-slurm2411",
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_help_says_how_to_use_it(script):
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["containers/build", "everything"], "unknown step 'everything'"),
        (["containers/export-squashfs"], "Usage:"),
        (["containers/export-squashfs", "--colour", "out.sqsh"], "unknown option --colour"),
        (["scripts/slurm-containers", "start"], "unknown subcommand 'start'"),
        (["scripts/slurm-containers"], "Usage:"),
        (["scripts/slurm-containers", "token-helper", "scalelab"], "usage: token-helper SERVICE_USER GROUP"),
    ],
)
def test_a_usage_error_is_exit_2_and_builds_nothing(argv, message):
    result = subprocess.run([str(ROOT / argv[0]), *argv[1:]], capture_output=True, text=True, check=False)
    assert (result.returncode, message in result.stderr) == (2, True), result.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="scripts/test installs shellcheck")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_shellcheck_finds_nothing(script):
    result = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_the_server_image_pins_every_package_of_the_server_extra():
    """The image installs only its pinned list: a package the server extra gained must be pinned there too."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["server"]
    wanted = {re.split(r"[<>=!~ \[]", requirement, maxsplit=1)[0].lower() for requirement in extra}
    pinned_text = (ROOT / "containers" / "server" / "requirements.txt").read_text()
    pinned = {line.split("==")[0].lower() for line in pinned_text.splitlines() if "==" in line}
    assert wanted <= pinned, sorted(wanted - pinned)
