"""The scalelab command against the app in-process: what it prints, and the exit codes scripts rely on."""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
import time

import pytest
from sqlmodel import Session

from client import cli
from contract.states import RunState
from server.models import Run, RunSummary
from server.scheduler.slurm import SlurmScheduler
from tests.conftest import make_client
from tests.factories import ROOT, course_log, experiment_row, run_row, spec
from tests.server.api.test_experiments import counts, failing_sbatch

SWEEP = ROOT / "examples" / "sweep.toml"


def scalelab(client, capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv), http=client)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def logdir(tmp_path):
    directory = tmp_path / "old-study"
    directory.mkdir()
    for gpus in (1, 2, 16):
        (directory / f"run_{gpus}gpus.out").write_text(course_log(gpus))
    (directory / ".hidden").write_text("editor swap file")
    return directory


# ---- help and connection -----------------------------------------------------------------------------------------

COMMANDS = ["submit", "ls", "show", "logs", "watch", "cancel", "export", "import"]
COMMANDS += ["profiles", "resubmit", "clone", "events"]


@pytest.mark.parametrize("argv", [[], *([command] for command in COMMANDS)])
def test_help_everywhere_documents_the_exit_codes(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: scalelab")
    assert "exit codes:" in out and "3  the server cannot be reached" in out


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


# ---- submit ------------------------------------------------------------------------------------------------------


def test_dry_run_prints_the_runs_and_a_script_and_submits_nothing(client, capsys, settings):
    code, out, _ = scalelab(client, capsys, "submit", str(SWEEP), "--dry-run")
    assert code == cli.EXIT_OK
    assert "2 runs; nothing was submitted (--dry-run)" in out
    assert "every run: model=mlp dataset=synthetic strategy=ddp" in out
    assert "max_new_tokens" not in out  # inference-only fields are noise in a training sweep
    table = out[out.index("#  gpus") :].splitlines()
    assert [line.split() for line in table[1:3]] == [["0", "1"], ["1", "2"]]
    assert "#!/bin/bash\n" in out and "/RUN_ID/spec.json" in out
    assert counts(client) == (0, 0)


def test_submit_prints_the_experiment_and_exit_1_when_the_scheduler_refuses(settings, capsys):
    with make_client(settings, SlurmScheduler(run=failing_sbatch)) as client:
        code, out, err = scalelab(client, capsys, "submit", str(ROOT / "examples" / "experiment.json"), "-q")
        assert code == cli.EXIT_FAILED
        assert counts(client) == (1, 3)
    assert len(out.strip()) == 10  # only the id, for $(...)
    assert err.count("was not submitted: sbatch refused the job") == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "x"\n[base]\nepochs = 0\n', "base.epochs: Input should be greater than or equal to 1"),
        ('name = "x"\n[grid]\ngpus = [1, 3]\n', "grid: gpus=3: global_batch_size (64) must be divisible by gpus (3)"),
        ('name = "x"\n[base\n', "not valid TOML"),
        ('name = "x"\n[resources]\ntime_limit = 00:10:00\n', 'resources.time_limit must be quoted: "00:10:00"'),
        ("[1, 2]", "not valid TOML"),
    ],
)
def test_invalid_experiments_are_exit_2_and_named(client, capsys, tmp_path, text, message):
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    code, _, err = scalelab(client, capsys, "submit", str(path))
    assert code == cli.EXIT_USAGE
    assert message in err
    assert counts(client) == (0, 0)


def test_json_experiments_are_read_by_their_suffix(client, capsys, tmp_path):
    path = tmp_path / "sweep.json"
    path.write_text('["not", "an", "experiment"]')
    code, _, err = scalelab(client, capsys, "submit", str(path), "--dry-run")
    assert code == cli.EXIT_USAGE
    assert "an experiment is a table of fields" in err
    code, _, err = scalelab(client, capsys, "submit", str(tmp_path / "missing.toml"))
    assert code == cli.EXIT_USAGE
    assert err.startswith(f"scalelab: error: cannot read {tmp_path / 'missing.toml'}: No such file")


# ---- import, and reading what it made ----------------------------------------------------------------------------


def test_import_then_list_show_log_export_and_watch(client, capsys, logdir):
    code, out, _ = scalelab(client, capsys, "import", str(logdir), "--name", "spring course")
    assert code == cli.EXIT_OK, out
    assert out.startswith("imported 3 logs as experiment ")
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[2:]] == ["run_1gpus.out", "run_2gpus.out", "run_16gpus.out"]
    experiment = client.get("/api/experiments").json()["data"][0]
    assert (experiment["name"], experiment["states"]) == ("spring course", {"completed": 3})
    runs = client.get(f"/api/runs?experiment_id={experiment['id']}").json()["data"]
    first = min(runs, key=lambda run: run["position"])

    code, out, _ = scalelab(client, capsys, "ls")
    assert code == 0 and experiment["id"] in out and "3 completed" in out

    code, out, _ = scalelab(client, capsys, "ls", experiment["id"])
    listed = [line.split()[0] for line in out.splitlines()[1:]]
    assert (code, listed) == (0, [run["id"] for run in sorted(runs, key=lambda run: run["position"])])

    code, out, _ = scalelab(client, capsys, "show", first["id"])
    assert code == 0
    assert "last epoch" in out and "2 of 2" in out and "train loss" in out
    assert "scheduler" in out and "import" in out

    code, out, _ = scalelab(client, capsys, "logs", first["id"])
    assert (code, out) == (0, course_log(1))

    code, out, _ = scalelab(client, capsys, "export", experiment["id"], "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [row["gpus"] for row in rows] == ["1", "2", "16"]
    code, out, _ = scalelab(client, capsys, "export", experiment["id"], "--json")
    assert [row["gpus"] for row in json.loads(out)["data"]] == [1, 2, 16]

    code, out, _ = scalelab(client, capsys, "watch", experiment["id"])
    assert code == cli.EXIT_OK
    assert out.count("[####################]  2/2 epochs") == 3
    assert out.endswith("all runs ended: 3 completed\n")

    code, _, err = scalelab(client, capsys, "cancel", first["id"])
    assert code == cli.EXIT_FAILED
    assert "has already ended (completed); there is nothing to cancel" in err


def test_import_names_every_unreadable_file_and_imports_nothing(client, capsys, logdir):
    (logdir / "notes.txt").write_text("no metrics in here\n")
    (logdir / "run_8gpus.out").write_bytes(b"[METRIC] epoch=1 loss=\xff time=2\n")
    code, _, err = scalelab(client, capsys, "import", str(logdir))
    assert code == cli.EXIT_USAGE
    assert "notes.txt: no [METRIC] records" in err
    assert "run_8gpus.out: unreadable metric lines: line 1: " in err
    assert "run_1gpus.out" not in err
    assert err.rstrip().endswith("nothing was imported")
    assert counts(client) == (0, 0)


def test_import_reads_only_the_files_asked_for(client, capsys, logdir):
    (logdir / "notes.txt").write_text("no metrics in here\n")
    code, out, _ = scalelab(client, capsys, "import", str(logdir), "--glob", "*.out", "-q")
    assert code == cli.EXIT_OK
    assert client.get(f"/api/experiments/{out.strip()}").json()["name"] == "imported from old-study"


@pytest.mark.parametrize(("target", "message"), [("missing", "is not a directory"), ("empty", "no files matching")])
def test_import_of_nothing_is_a_usage_error(client, capsys, tmp_path, target, message):
    (tmp_path / "empty").mkdir()
    code, _, err = scalelab(client, capsys, "import", str(tmp_path / target))
    assert code == cli.EXIT_USAGE and message in err


# ---- following runs ----------------------------------------------------------------------------------------------


def advance_on_sleep(monkeypatch, client, step) -> None:
    """Between two polls, the world moves on as `step(session)` says; no real waiting."""

    def sleep(_seconds: float) -> None:
        with Session(client.app.state.engine) as session:
            step(session)
            session.commit()

    monkeypatch.setattr(time, "sleep", sleep)


def test_logs_follow_prints_new_output_until_the_run_ends(client, capsys, session, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "output.log").write_text("epoch 1\n")
    run = run_row(session, experiment_row(session), run_dir, state=RunState.running)

    def job_ends(session):
        (run_dir / "output.log").open("a").write("epoch 2\ndone\n")
        ended = session.get(Run, run.id)
        ended.state = RunState.completed
        session.add(ended)

    advance_on_sleep(monkeypatch, client, job_ends)
    code, out, _ = scalelab(client, capsys, "logs", run.id, "--follow")
    assert (code, out) == (0, "epoch 1\nepoch 2\ndone\n")


def test_watch_shows_progress_until_every_run_has_ended_and_fails_if_one_did(
    client, capsys, session, tmp_path, monkeypatch
):
    experiment = experiment_row(session, "sweep")
    runs = [
        run_row(session, experiment, tmp_path / str(gpus), run_spec=spec(gpus=gpus, epochs=2), position=position)
        for position, gpus in enumerate([1, 2])
    ]
    moves = iter(
        [
            (0, RunState.running, 1, False),
            (1, RunState.failed, 0, True),
            (0, RunState.completed, 2, False),
            (0, RunState.completed, 2, True),  # the monitor's last read, one cycle after the end
        ]
    )

    def step(session):
        index, state, epochs, read = next(moves)
        run = session.get(Run, runs[index].id)
        run.state, run.ingest_done, run.job_id = state, read, "42"
        run.message = "the worker reported: boom" if state is RunState.failed else None
        summary = session.get(RunSummary, run.id) or RunSummary(run_id=run.id)
        summary.epochs_done = epochs
        session.add_all([run, summary])

    advance_on_sleep(monkeypatch, client, step)
    code, out, _ = scalelab(client, capsys, "watch", experiment.id)
    assert code == cli.EXIT_FAILED
    lines = out.splitlines()
    assert lines[0] == f'experiment {experiment.id} "sweep": 2 runs'
    assert f"{runs[0].id}  ddp       1 gpus  running        [##########..........]  1/2 epochs" in lines
    assert any(line.endswith("0/2 epochs  the worker reported: boom") for line in lines)
    assert lines[-1] == "all runs ended: 1 completed, 1 failed"


# ---- cancel and listing ------------------------------------------------------------------------------------------


def test_cancel_takes_a_run_or_an_experiment(client, capsys, session, tmp_path):
    experiment = experiment_row(session)
    first = run_row(session, experiment, tmp_path / "a", state=RunState.created)
    second = run_row(session, experiment, tmp_path / "b", state=RunState.created, position=1)
    code, out, _ = scalelab(client, capsys, "cancel", first.id)
    assert (code, out) == (0, f"run {first.id}: cancelled (it had not been submitted)\n")
    code, out, _ = scalelab(client, capsys, "cancel", experiment.id)
    assert (code, out) == (0, f"run {second.id}: cancelled (it had not been submitted)\n")
    code, _, err = scalelab(client, capsys, "cancel", "nope")
    assert (code, err) == (cli.EXIT_NOT_FOUND, "scalelab: error: no run or experiment 'nope'\n")


def test_tables_fit_the_terminal(client, capsys, session, tmp_path, monkeypatch):
    experiment = experiment_row(session, "a name long enough to need shortening on a narrow terminal " * 2)
    run_row(session, experiment, tmp_path, message="sbatch: error: " + "x" * 200)
    monkeypatch.setenv("COLUMNS", "60")
    for argv in (["ls"], ["ls", experiment.id], ["ls", "--runs", "--state", "submitted"]):
        code, out, _ = scalelab(client, capsys, *argv)
        assert code == 0
        assert out.strip() and all(len(line) <= 60 for line in out.splitlines()), out


def test_unknown_ids_are_exit_5(client, capsys):
    for argv in (["ls", "nope"], ["show", "nope"], ["logs", "nope"], ["watch", "nope"], ["export", "nope"]):
        code, _, err = scalelab(client, capsys, *argv)
        assert code == cli.EXIT_NOT_FOUND, argv
        assert "nope" in err


def test_the_command_never_imports_torch():
    code = "import sys, client.cli\nassert 'torch' not in sys.modules\n"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
