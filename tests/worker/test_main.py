"""`python -m worker`: the commands, the spec they read, and the kind of run each accepts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.factories import spec


def worker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "worker", *args], capture_output=True, text=True, check=False)


def test_invalid_spec_file_is_refused(tmp_path):
    bad = tmp_path / "spec.json"
    bad.write_text('{"gpus": 0}')
    result = worker("train", "--spec", str(bad))
    assert result.returncode == 1
    assert "is invalid" in result.stderr
    assert "gpus" in result.stderr


def test_help_answers_without_training():
    result = worker("train", "--help")
    assert result.returncode == 0
    assert "--spec" in result.stdout


@pytest.mark.parametrize(
    ("command", "fields", "kind"),
    [
        ("train", {"kind": "inference", "model": "gpt", "strategy": "single", "checkpoint": "/trained"}, "inference"),
        ("infer", {}, "train"),
    ],
)
def test_each_command_refuses_the_other_kind_of_spec(tmp_path: Path, command, fields, kind):
    path = tmp_path / "spec.json"
    path.write_text(spec(**fields).model_dump_json())
    result = worker(command, "--spec", str(path))
    assert result.returncode == 1
    assert f"is of kind {kind}: run it with the other command" in result.stderr
