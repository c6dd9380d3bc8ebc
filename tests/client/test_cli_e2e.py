"""The scalelab command against a real server on the real local Slurm, as the README shows it."""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from benches.server_process import running_server
from tests.factories import ROOT, course_log

pytestmark = pytest.mark.slurm
SCALELAB = Path(sys.executable).parent / "scalelab"


def readme_session() -> list[str]:
    """The commands of the README's terminal session, in order."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## From the command line") :]
    block = re.search(r"```console\n(.*?)```", section, flags=re.S)
    assert block, "the README's command-line section has no console block"
    return [line.removeprefix("$ ") for line in block.group(1).splitlines() if line.startswith("$ ")]


def shell(script: str, url: str, tmp_path: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # A user's own config file or token must not leak into the test, nor the test's into theirs.
    env = {**os.environ, "SCALELAB_URL": url, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("SCALELAB_TOKEN", None)
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{script}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def experiments_by_name(url: str) -> dict[str, dict]:
    listed = httpx.get(f"{url}/api/experiments", timeout=10).json()["data"]
    return {experiment["name"]: experiment for experiment in listed}


@pytest.mark.torch
def test_the_readme_session_works_as_written(slurm_server, tmp_path):
    commands = readme_session()
    assert commands[0] == "source .venv/bin/activate"
    assert any(command.startswith("scalelab submit examples/sweep.toml") for command in commands)
    result = shell("\n".join(commands), slurm_server, tmp_path)
    server_log = (tmp_path / "server.log").read_text()[-3000:]
    assert result.returncode == 0, result.stdout + result.stderr + server_log
    out = result.stdout
    assert "2 runs; nothing was submitted (--dry-run)" in out
    assert "all runs ended: 2 completed" in out

    lines = out.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("run_id,state,strategy,gpus,")))
    # The export's rows, read as CSV from its header on: a quoted field may span lines (a flag's note), so a row is not
    # always one line of the output; what follows the export is never read, as the first two rows are the runs.
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[header:]))))[:2]
    assert [row["gpus"] for row in rows] == ["1", "2"]
    assert {(row["state"], row["epochs_done"]) for row in rows} == {("completed", "4")}

    experiments = experiments_by_name(slurm_server)
    assert experiments["MLP data-parallel scaling, from the command line"]["states"] == {"completed": 2}
    assert experiments["course study 2024"]["states"] == {"completed": 3}


def test_import_of_course_logs_is_found_through_the_api(slurm_server, tmp_path):
    logdir = tmp_path / "spring-2024"
    logdir.mkdir()
    for gpus in (1, 2, 4):
        (logdir / f"slurm-{1000 + gpus}_{gpus}gpus.out").write_text(course_log(gpus, epochs=3, epoch_time_s=8.0))

    result = shell(f"'{SCALELAB}' import '{logdir}' --name 'spring 2024 scaling' --quiet", slurm_server, tmp_path)
    assert result.returncode == 0, result.stderr
    experiment_id = result.stdout.strip()

    experiment = experiments_by_name(slurm_server)["spring 2024 scaling"]
    assert (experiment["id"], experiment["run_count"], experiment["states"]) == (experiment_id, 3, {"completed": 3})
    rows = httpx.get(f"{slurm_server}/api/experiments/{experiment_id}/compare", timeout=10).json()["data"]
    assert [(row["gpus"], row["epochs_done"]) for row in rows] == [(1, 3), (2, 3), (4, 3)]
    assert [row["speedup"] for row in rows] == pytest.approx([1.0, 2.0, 4.0])

    # One unreadable file: it is named, the command says so with exit 2, and nothing more is imported.
    (logdir / "slurm-1008_8gpus.out").write_text(course_log(8) + "[METRIC] epoch=3 loss=0.1 time=\n")
    result = shell(f"'{SCALELAB}' import '{logdir}'", slurm_server, tmp_path)
    assert result.returncode == 2
    assert "slurm-1008_8gpus.out: unreadable metric lines: line 8:" in result.stderr
    assert "nothing was imported" in result.stderr
    assert len(experiments_by_name(slurm_server)) == 1


def test_a_server_that_asks_for_sign_in_takes_the_token_from_the_environment(slurm: None, tmp_path):
    with running_server(tmp_path, "slurm", {"SCALELAB_AUTH": "true"}) as url:
        token = re.findall(r"sl_[A-Za-z0-9_-]{40,}", (tmp_path / "server.log").read_text())[0]
        refused = shell(f"{SCALELAB} ls", url, tmp_path)
        assert refused.returncode == 4
        assert "rejected the token" in refused.stderr and "SCALELAB_TOKEN" in refused.stderr
        listed = shell(f"SCALELAB_TOKEN={token} {SCALELAB} ls", url, tmp_path)
        assert listed.returncode == 0, listed.stderr
        wrong = shell(f"{SCALELAB} --token sl_wrong ls", url, tmp_path)
        assert wrong.returncode == 4 and "unknown or revoked" in wrong.stderr
