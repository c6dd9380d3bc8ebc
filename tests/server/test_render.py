"""The batch script: golden files per launcher, and bash and shellcheck find nothing wrong."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from server.render import BatchJob, render_script
from tests.factories import spec

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
UPDATE = os.environ.get("SCALELAB_UPDATE_GOLDEN") == "1"

JOBS = {
    "srun": BatchJob(
        run_id="0123456789",
        run_dir=Path("/shared/scalelab/runs/0123456789"),
        time_limit="1-02:00:00",
        worker_python=Path("/opt/scalelab/venv/bin/python"),
        launcher="srun",
        partition="gpu",
    ),
    "local": BatchJob(
        run_id="0123456789",
        run_dir=Path("/home/me/.local/share/scalelab/runs/0123456789"),
        time_limit="00:10:00",
        worker_python=Path("/home/me/scalelab/.venv/bin/python"),
        launcher="local",
    ),
}


def rendered(launcher: str) -> str:
    return render_script(spec(gpus=8, nodes=2, global_batch_size=256, epochs=3), JOBS[launcher])


@pytest.mark.parametrize("launcher", sorted(JOBS))
def test_matches_golden_file(launcher):
    golden = GOLDEN / f"job-{launcher}.sbatch"
    if UPDATE:
        golden.write_text(rendered(launcher))
    assert rendered(launcher) == golden.read_text(), "rerun with SCALELAB_UPDATE_GOLDEN=1 if the change is intended"


@pytest.mark.parametrize("launcher", sorted(JOBS))
def test_bash_parses_it(launcher, tmp_path):
    script = tmp_path / "job.sbatch"
    script.write_text(rendered(launcher))
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("launcher", sorted(JOBS))
def test_shellcheck_finds_nothing(launcher, tmp_path):
    if not shutil.which("shellcheck"):
        pytest.fail("shellcheck is not installed: scripts/test installs it (Debian package shellcheck)")
    script = tmp_path / "job.sbatch"
    script.write_text(rendered(launcher))
    result = subprocess.run(["shellcheck", "--severity=style", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_slurm_script_asks_for_the_spec_layout():
    script = rendered("srun")
    assert "#SBATCH --nodes=2\n" in script
    assert "#SBATCH --ntasks-per-node=4\n" in script
    assert "#SBATCH --time=1-02:00:00\n" in script
    assert "#SBATCH --partition=gpu\n" in script
    assert "#SBATCH --output=/shared/scalelab/runs/0123456789/output.log\n" in script


def test_local_script_enforces_the_time_limit():
    assert "exec timeout 600 " in rendered("local")
    assert "--nproc-per-node=8" in rendered("local")


def test_paths_are_quoted_for_the_shell():
    job = JOBS["local"]
    odd = BatchJob(**{**job.__dict__, "worker_python": Path("/opt/my venv/bin/python"), "run_dir": Path("/r/x")})
    assert "'/opt/my venv/bin/python'" in render_script(spec(), odd)


def test_directive_values_outside_the_safe_alphabet_are_refused():
    job = JOBS["srun"]
    with pytest.raises(ValueError, match="unsafe value for #SBATCH --partition"):
        render_script(spec(), BatchJob(**{**job.__dict__, "partition": "gpu\nrm -rf /"}))
    with pytest.raises(ValueError, match="unsafe value for #SBATCH --output"):
        render_script(spec(), BatchJob(**{**job.__dict__, "run_dir": Path("/runs/a b")}))
