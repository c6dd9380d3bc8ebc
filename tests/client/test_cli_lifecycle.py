"""The scalelab commands of a run's lifecycle against the app in-process: profiles, resubmit, clone, events,
and what submit says about combinations it left out or a scheduler it could not reach."""

from __future__ import annotations

import json
import re

import pytest

from client import cli
from contract.rundir import SCRIPT_FILE
from contract.states import RunState
from server.scheduler.slurm import SlurmScheduler
from tests.client.test_cli import scalelab
from tests.conftest import make_client
from tests.factories import EXAMPLE_REQUEST, ROOT, experiment_row, run_row
from tests.server.api.test_experiments import counts, failing_sbatch, unreachable_sbatch
from tests.server.api.test_runs import until_final

NEW_COMMANDS = ["profiles", "resubmit", "clone", "events"]
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


def shown(out: str) -> dict[str, str]:
    """The `key  value` lines of show and profiles NAME."""
    return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines() if re.search(r"\S\s{2,}\S", line))


def ended_run(session, experiment, tmp_path, name="run", *, state=RunState.failed, position=0):
    """A run that ended after its first attempt, whose batch script runs again on the local scheduler."""
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / SCRIPT_FILE).write_text("#!/bin/bash\necho again\n")
    return run_row(
        session, experiment, run_dir, state=state, position=position, job_id="41", attempt=1, profile="local"
    )


# ---- help --------------------------------------------------------------------------------------------------------


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


# ---- profiles ----------------------------------------------------------------------------------------------------


@pytest.fixture
def profiles_client(settings, local_scheduler):
    with make_client(
        settings.model_copy(update={"profiles_dir": ROOT / "examples" / "profiles"}), local_scheduler
    ) as c:
        yield c


def test_profiles_lists_partitions_with_their_limits_and_marks_the_defaults(profiles_client, capsys):
    code, out, _ = scalelab(profiles_client, capsys, "profiles")
    assert code == cli.EXIT_OK
    lines = out.splitlines()
    assert lines[0].split()[:8] == ["PROFILE", "RUNTIME", "PARTITION", "MAX", "NODES", "GPUS/NODE", "MAX", "TIME"]
    rows = [line.split() for line in lines[1:-1]]
    assert rows[0][:2] == ["apptainer", "apptainer"]
    assert rows[3][:9] == ["local", "*", "none", "debug", "*", "1", "8", "1-00:00:00", "-"]
    pyxis = lines.index(next(line for line in lines if line.startswith("pyxis ")))
    assert lines[pyxis].split()[:8] == ["pyxis", "pyxis", "gpu", "*", "16", "4", "1-00:00:00", "gpu"]
    # The second partition's line leaves the profile's columns empty.
    assert lines[pyxis + 1].split() == ["debug", "2", "4", "00:30:00", "gpu"]
    assert lines[-1].startswith("* the default")


def test_profiles_fit_a_narrow_terminal(profiles_client, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "70")
    for argv in (["profiles"], ["profiles", "pyxis"]):
        code, out, _ = scalelab(profiles_client, capsys, *argv)
        assert code == cli.EXIT_OK
        assert all(len(line) <= 70 for line in out.splitlines()), out


def test_one_profile_in_detail(profiles_client, capsys):
    code, out, _ = scalelab(profiles_client, capsys, "profiles", "pyxis")
    assert code == cli.EXIT_OK
    assert out.startswith("profile            pyxis\n")
    assert "image              /shared/images/scalelab-worker.sqsh\n" in out
    assert "account            ml-scaling\n" in out
    assert "at the time limit  Slurm signals the worker to save 120 s before it" in out
    assert "qos" not in shown(out[: out.index("PARTITION")])  # unset fields are left out
    partitions = out[out.index("PARTITION") :].splitlines()
    assert partitions[1].split() == ["gpu", "*", "16", "4", "1-00:00:00", "gpu", "80", "16"]
    options = out[out.index("sbatch options users may set (resources.sbatch_options):") :].splitlines()
    assert options[2].split()[:3] == ["constraint", "a100,", "h100"]
    assert [line.split()[0] for line in options[2:]] == ["constraint", "mem", "qos"]

    code, out, _ = scalelab(profiles_client, capsys, "profiles", "local")
    assert out.startswith("profile            local (the default)\n")
    nice = next(line for line in out.splitlines() if line.startswith("nice "))
    assert re.split(r"\s{2,}", nice) == ["nice", "a whole number, 0 to 10000", "lower the job's priority by this much"]


def test_profiles_as_json_are_what_the_api_returns(profiles_client, capsys):
    code, out, _ = scalelab(profiles_client, capsys, "profiles", "--json")
    assert code == cli.EXIT_OK
    listing = json.loads(out)
    assert listing == profiles_client.get("/api/profiles").json()
    assert (listing["default"], listing["count"]) == ("local", 5)
    code, out, _ = scalelab(profiles_client, capsys, "profiles", "cscs", "--json")
    assert json.loads(out) == profiles_client.get("/api/profiles/cscs").json()


def test_an_unknown_profile_is_exit_5(profiles_client, capsys):
    code, _, err = scalelab(profiles_client, capsys, "profiles", "nope")
    assert (code, err) == (cli.EXIT_NOT_FOUND, "scalelab: error: no cluster profile 'nope'\n")


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


# ---- resubmit, events, show --------------------------------------------------------------------------------------


def test_a_resubmitted_run_runs_again_and_its_events_tell_the_story(client, capsys, session, tmp_path):
    experiment = experiment_row(session)
    run = ended_run(session, experiment, tmp_path)
    code, out, err = scalelab(client, capsys, "resubmit", run.id)
    assert code == cli.EXIT_OK, err
    job = client.get(f"/api/runs/{run.id}").json()["job_id"]
    assert job.startswith("local-")
    assert out == (
        f"run {run.id}: submitted again as job {job} (attempt 2)\nfollow it with: scalelab watch {experiment.id}\n"
    )
    until_final(client, run.id)

    code, out, _ = scalelab(client, capsys, "events", run.id)
    assert code == cli.EXIT_OK
    header, *rows = out.splitlines()
    assert header.split() == ["TIME", "EVENT", "JOB", "STATE", "SLURM", "STATE", "DETAIL"]
    assert rows[0].split()[2:] == ["resubmitted", "41", "failed", "-", "after", "failed"]
    assert rows[1].split()[2:] == ["submitted", job, "submitted", "-", "attempt", "2"]
    assert rows[-1].split()[2:6] == ["state", job, "completed", "COMPLETED"]

    code, out, _ = scalelab(client, capsys, "show", run.id)
    assert shown(out) | {"profile": "local", "attempt": "2", "state": "completed"} == shown(out)


def test_resubmitting_an_experiment_takes_only_what_did_not_complete_and_waits_for_a_slot(
    client, capsys, session, tmp_path
):
    experiment = experiment_row(session, max_concurrent=1)
    failed = ended_run(session, experiment, tmp_path, "failed")
    ended_run(session, experiment, tmp_path, "done", state=RunState.completed, position=1)
    code, out, _ = scalelab(client, capsys, "resubmit", experiment.id)
    assert code == cli.EXIT_OK
    assert out.splitlines() == [
        f"run {failed.id}: resubmitted, waiting for a slot: at most 1 runs of this experiment run at once",
        f"follow it with: scalelab watch {experiment.id}",
    ]
    code, out, _ = scalelab(client, capsys, "show", failed.id)
    assert shown(out)["state"] == "created (waiting for a slot)"
    code, out, _ = scalelab(client, capsys, "ls", experiment.id)
    assert f"{failed.id}  {experiment.id}  created (waiting for a slot)" in out


def test_what_cannot_be_resubmitted_is_exit_1_and_what_is_not_there_exit_5(client, capsys, session, tmp_path):
    experiment = experiment_row(session)
    done = ended_run(session, experiment, tmp_path, "done", state=RunState.completed)
    live = ended_run(session, experiment_row(session), tmp_path, "live", state=RunState.running)
    cases = [
        ([done.id], cli.EXIT_FAILED, f"run {done.id} cannot be resubmitted: it completed: clone it instead"),
        ([live.id], cli.EXIT_FAILED, f"run {live.id} cannot be resubmitted: it is still live: cancel it first"),
        ([experiment.id], cli.EXIT_FAILED, f"no run of experiment {experiment.id} ended without completing"),
        (["nope"], cli.EXIT_NOT_FOUND, "no run or experiment 'nope'"),
        (["--run", experiment.id], cli.EXIT_NOT_FOUND, f"no run '{experiment.id}'"),
        (["--experiment", done.id], cli.EXIT_NOT_FOUND, f"no experiment '{done.id}'"),
    ]
    for argv, expected, message in cases:
        code, out, err = scalelab(client, capsys, "resubmit", *argv)
        assert (code, out) == (expected, ""), argv
        assert err.startswith(f"scalelab: error: {message}"), err


@pytest.mark.parametrize("target", ["run", "experiment"])
def test_resubmitting_to_an_unreachable_slurm_is_exit_1_and_keeps_the_run(
    unreachable, capsys, session, tmp_path, target
):
    experiment = experiment_row(session)
    run = ended_run(session, experiment, tmp_path)
    code, out, err = scalelab(unreachable, capsys, "resubmit", run.id if target == "run" else experiment.id)
    assert (code, out) == (cli.EXIT_FAILED, "")
    assert "Slurm cannot be reached" in err and err.rstrip().endswith("(HTTP 503: try again in 30 s)")
    assert unreachable.get(f"/api/runs/{run.id}").json()["state"] == "submit_failed"


def test_events_of_a_run_without_any_and_of_no_run(client, capsys, session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path)
    code, out, _ = scalelab(client, capsys, "events", run.id)
    assert (code, out) == (cli.EXIT_OK, f"no events recorded for run {run.id}\n")
    code, _, err = scalelab(client, capsys, "events", "nope")
    assert (code, err) == (cli.EXIT_NOT_FOUND, "scalelab: error: no run 'nope'\n")


# ---- clone -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "change"),
    [
        ("base.epochs=3", ("base", "epochs", 3)),
        ("base.lr=0.1", ("base", "lr", 0.1)),
        ("base.compile=true", ("base", "compile", True)),
        ("base.precision=bf16", ("base", "precision", "bf16")),
        ("resources.time_limit=00:20:00", ("resources", "time_limit", "00:20:00")),
        ('resources.sbatch_options={"mem": "4G"}', ("resources", "sbatch_options", {"mem": "4G"})),
        ("grid.gpus=1,2,4", ("grid", "gpus", [1, 2, 4])),
        ("grid.gpus=[1, 2]", ("grid", "gpus", [1, 2])),
        ("grid.strategy=ddp", ("grid", "strategy", ["ddp"])),
        ("grid.precision=fp32, bf16", ("grid", "precision", ["fp32", "bf16"])),
    ],
)
def test_set_reads_json_where_it_can_and_text_elsewhere(text, change):
    assert cli.build_parser().parse_args(["clone", "x", "--set", text]).set == [change]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "epochs=3"], "a key is base.FIELD, grid.FIELD or resources.FIELD"),
        (["--set", "base.epochs"], "give KEY=VALUE"),
        (["--set", "grid.gpus=1,,2"], "an empty value in the list"),
        (["--set", "resources.sbatch_options.mem=4G"], "takes its whole table as JSON"),
        (["--unset", "name"], "a key is base.FIELD"),
    ],
)
def test_a_change_that_is_not_one_is_a_usage_error(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["clone", "x", *argv])
    assert exit_.value.code == cli.EXIT_USAGE
    assert message in capsys.readouterr().err


def test_clone_previews_and_submits_the_changed_request(refusing, capsys):
    code, out, _ = scalelab(refusing, capsys, "submit", str(EXAMPLE_REQUEST), "-q")
    original = out.strip()
    changes = [
        *("--name", "longer, in two precisions"),
        *("--set", "base.epochs=3", "--set", "grid.gpus=2,4", "--set", "grid.precision=fp32,bf16"),
        *("--set", "resources.time_limit=00:20:00", "--unset", "grid.strategy"),
    ]
    code, out, _ = scalelab(refusing, capsys, "clone", original, *changes, "--dry-run")
    assert code == cli.EXIT_OK
    assert out.startswith('experiment "longer, in two precisions": 4 runs; nothing was submitted (--dry-run)\n')
    assert "epochs=3" in out and "#SBATCH --time=00:20:00" in out
    table = out[out.index("#  gpus  precision") :].splitlines()
    assert [line.split() for line in table[1:5]] == [
        ["0", "2", "fp32"],
        ["1", "2", "bf16"],
        ["2", "4", "fp32"],
        ["3", "4", "bf16"],
    ]
    assert counts(refusing) == (1, 3)

    code, out, err = scalelab(refusing, capsys, "clone", original, *changes)
    assert code == cli.EXIT_FAILED  # this Slurm refuses every job
    clone = out.split()[1]
    assert out.startswith(f'experiment {clone} "longer, in two precisions" (a clone of {original}): 4 runs')
    assert err.count("was not submitted: sbatch refused the job") == 4
    request = refusing.get(f"/api/experiments/{clone}").json()["request"]
    assert request["base"]["epochs"] == 3
    assert request["grid"] == {"gpus": [2, 4], "precision": ["fp32", "bf16"]}
    assert request["resources"]["time_limit"] == "00:20:00"


def test_clone_refuses_what_submit_would_and_skips_on_request(refusing, capsys):
    code, out, _ = scalelab(refusing, capsys, "submit", str(EXAMPLE_REQUEST), "-q")
    original = out.strip()
    code, _, err = scalelab(refusing, capsys, "clone", original, "--set", "base.epochs=0")
    assert code == cli.EXIT_USAGE
    assert "base.epochs: Input should be greater than or equal to 1" in err
    code, _, err = scalelab(refusing, capsys, "clone", original, "--set", "grid.gpus=1,3")
    assert code == cli.EXIT_USAGE
    assert "grid: strategy=ddp, gpus=3: global_batch_size (64) must be divisible by gpus (3)" in err
    assert "--skip-invalid leaves out" in err
    assert counts(refusing) == (1, 3)

    code, out, _ = scalelab(
        refusing, capsys, "clone", original, "--set", "grid.gpus=1,3", "--skip-invalid", "--dry-run"
    )
    assert code == cli.EXIT_OK
    assert "left out 1 combination that cannot run:\n  strategy=ddp, gpus=3: global_batch_size (64)" in out

    code, _, err = scalelab(refusing, capsys, "clone", original, "--set", "base.epochs=3", "--unset", "base.epochs")
    assert (code, err) == (cli.EXIT_USAGE, "scalelab: error: base.epochs is given more than once\n")
    for argv in (["nope"], ["nope", "--dry-run"]):
        code, _, err = scalelab(refusing, capsys, "clone", *argv)
        assert (code, err) == (cli.EXIT_NOT_FOUND, "scalelab: error: no experiment 'nope'\n")
