"""The stacks helper a program (and the worker) installs: where it cannot write, the run goes on without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract import stacks


def test_a_run_directory_it_cannot_write_leaves_the_program_running_and_says_so(tmp_path: Path, capsys):
    not_a_directory = tmp_path / "run"
    not_a_directory.write_text("a file where the run directory should be")
    assert stacks.install(not_a_directory, rank=1) is None
    assert "no stacks on SIGUSR2 for this rank" in capsys.readouterr().err


def test_without_a_run_directory_nothing_is_installed(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SCALELAB_RUN_DIR", raising=False)
    assert stacks.install() is None
