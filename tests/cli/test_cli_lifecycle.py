"""The scalelab commands of a run's lifecycle against the app in-process: profiles, resubmit, clone, events,
and what submit says about combinations it left out or a scheduler it could not reach."""

from __future__ import annotations

import pytest

from server import cli
from server.scheduler.slurm import SlurmScheduler
from tests.api.test_experiments import counts, failing_sbatch, unreachable_sbatch
from tests.cli.test_cli import scalelab
from tests.conftest import make_client
from tests.factories import EXAMPLE_REQUEST

# global_batch_size 64 does not divide among 3 processes: one combination that cannot run.
UNEVEN = 'name = "uneven"\n[base]\nglobal_batch_size = 64\n[grid]\ngpus = [1, 2, 3]\n'
UNEVEN_REASON = "gpus=3: global_batch_size (64) must be divisible by gpus (3)"


@pytest.fixture
def uneven(tmp_path):
    path = tmp_path / "uneven.toml"
    path.write_text(UNEVEN)
    return path


@pytest.fixture
def refusing(settings):
    """The app on a Slurm whose sbatch refuses every job, as it does for an unknown account."""
    with make_client(settings, SlurmScheduler(run=failing_sbatch)) as client:
        yield client


@pytest.fixture
def unreachable(settings):
    """The app on a Slurm whose controller does not answer."""
    with make_client(settings, SlurmScheduler(run=unreachable_sbatch)) as client:
        yield client


# ---- help --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["submit"])
def test_new_commands_show_examples_and_exit_codes(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    examples = out[out.index("examples:") :]
    assert f"  scalelab {command} " in examples
    assert "409" in out and "503" in out  # the exit codes name what resubmitting can meet


# ---- submit: combinations left out, a scheduler out of reach -----------------------------------------------------


def test_a_combination_that_cannot_run_refuses_the_experiment_and_says_what_would_not(client, capsys, uneven):
    code, _, err = scalelab(client, capsys, "submit", str(uneven))
    assert code == cli.EXIT_USAGE
    assert f"grid: {UNEVEN_REASON}" in err
    assert err.rstrip().endswith("--skip-invalid leaves out the combinations that cannot run and keeps the rest")
    assert counts(client) == (0, 0)


def test_dry_run_with_skip_invalid_names_what_it_leaves_out_and_shows_any_runs_script(client, capsys, uneven):
    code, out, _ = scalelab(client, capsys, "submit", str(uneven), "--dry-run", "--skip-invalid", "--script", "1")
    assert code == cli.EXIT_OK
    assert out.startswith('experiment "uneven": 2 runs; nothing was submitted (--dry-run)\n')
    assert f"\nleft out 1 combination that cannot run:\n  {UNEVEN_REASON}" in out
    assert "batch script of run 1 (RUN_ID stands for" in out
    assert "--nproc-per-node=2" in out  # run 1 has 2 processes; the first has 1
    assert counts(client) == (0, 0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--script", "1"], "--script goes with --dry-run"),
        (["--dry-run", "--skip-invalid", "--script", "2"], "query.index: the experiment has 2 runs; index is from 0"),
    ],
)
def test_a_script_that_is_not_there_is_a_usage_error(client, capsys, uneven, argv, message):
    code, _, err = scalelab(client, capsys, "submit", str(uneven), *argv)
    assert code == cli.EXIT_USAGE
    assert message in err


def test_submit_with_skip_invalid_lists_what_it_left_out(refusing, capsys, uneven):
    code, out, err = scalelab(refusing, capsys, "submit", str(uneven), "--skip-invalid")
    assert code == cli.EXIT_FAILED  # this Slurm refuses every job
    assert out.splitlines()[0].endswith('"uneven": 2 runs (2 submit_failed)')
    assert f"left out 1 combination that cannot run:\n  {UNEVEN_REASON}" in out
    assert counts(refusing) == (1, 2)

    code, out, err = scalelab(refusing, capsys, "submit", str(uneven), "--skip-invalid", "-q")
    assert len(out.strip()) == 10  # still only the id on stdout
    assert f"scalelab: left out {UNEVEN_REASON}" in err


def test_submit_to_an_unreachable_slurm_is_exit_1_with_the_servers_words(unreachable, capsys):
    code, out, err = scalelab(unreachable, capsys, "submit", str(EXAMPLE_REQUEST))
    assert (code, out) == (cli.EXIT_FAILED, "")
    assert "Slurm cannot be reached" in err and "3 of its 3 runs are kept as submit_failed" in err
    assert "(HTTP 503: try again in 30 s)" in err
    kept = unreachable.get("/api/experiments").json()["data"][0]["id"]
    assert err.rstrip().endswith(
        f"(HTTP 503: try again in 30 s)\nfrom the command line, later: scalelab resubmit {kept}"
    )
