"""`scalelab submit --dry-run` shows the job array a run would go in, or why it goes as a job of its own."""

from __future__ import annotations

from client import cli
from server.scheduler.slurm import SlurmScheduler
from tests.client.helpers import scalelab
from tests.conftest import make_client
from tests.server.api.test_arrays_api import FakeSlurm

SEEDS = 'name = "seeds"\nisolation = "shared"\nrepeats = 3\n[base]\nglobal_batch_size = 64\n[grid]\ngpus = [1]\n'


def test_dry_run_prints_the_array_script_on_slurm(settings, capsys, tmp_path):
    path = tmp_path / "seeds.toml"
    path.write_text(SEEDS)
    slurm = FakeSlurm()
    with make_client(settings, SlurmScheduler(run=slurm)) as client:
        code, out, _ = scalelab(client, capsys, "submit", str(path), "--dry-run")
    assert code == cli.EXIT_OK
    assert "it goes to Slurm as a task of this job array (one sbatch for all its runs):" in out
    assert "#SBATCH --array=0-2\n" in out and "    2) run_id=RUN_ID_2;" in out
    assert slurm.calls == []


def test_dry_run_says_why_a_run_goes_alone(client, capsys, tmp_path):
    path = tmp_path / "seeds.toml"
    path.write_text(SEEDS)
    code, out, _ = scalelab(client, capsys, "submit", str(path), "--dry-run")
    assert code == cli.EXIT_OK
    assert "it goes to Slurm as a job of its own: the local scheduler submits one job per run" in out
