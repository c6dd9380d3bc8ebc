"""The experiment commands against the app in-process: submit, clone, ls, watch, cancel, resubmit, and what
they say about combinations left out or a scheduler out of reach."""

from __future__ import annotations

import json

import pytest

from client import cli
from client.experiments import SKIP_HINT, _progress_line
from client.schemas import RunView
from contract.states import FailureKind, RunState
from server.models import Run, RunSummary
from server.services.failure_kinds import ADVICE
from tests.client.helpers import SWEEP, UNEVEN_REASON, advance_on_sleep, answering, ended_run, scalelab, shown
from tests.factories import EXAMPLE_REQUEST, experiment_row, run_row, spec
from tests.server.api.test_experiments import counts

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


def test_submit_prints_the_experiment_and_exit_1_when_the_scheduler_refuses(refusing, capsys, example):
    code, out, err = scalelab(refusing, capsys, "submit", str(example), "-q")
    assert code == cli.EXIT_FAILED
    assert counts(refusing) == (1, 3)
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


def test_submit_to_an_unreachable_slurm_is_exit_1_with_the_servers_words(unreachable, capsys, example):
    code, out, err = scalelab(unreachable, capsys, "submit", str(example))
    assert (code, out) == (cli.EXIT_FAILED, "")
    assert "Slurm cannot be reached" in err and "3 of its 3 runs are kept as submit_failed" in err
    assert "(HTTP 503: try again in 30 s)" in err
    kept = unreachable.get("/api/experiments").json()["data"][0]["id"]
    assert err.rstrip().endswith(
        f"(HTTP 503: try again in 30 s)\nfrom the command line, later: scalelab resubmit {kept}"
    )


def test_a_problem_elsewhere_than_the_grid_gets_no_skip_hint(client, capsys, tmp_path):
    # base.epochs, and a grid value of the wrong type (at grid.gpus.0): --skip-invalid would not mend either.
    for text in ('name = "x"\n[base]\nepochs = 0\n', 'name = "x"\n[grid]\ngpus = ["many"]\n'):
        path = tmp_path / "sweep.toml"
        path.write_text(text)
        code, _, err = scalelab(client, capsys, "submit", str(path))
        assert code == cli.EXIT_USAGE
        assert "--skip-invalid" not in err, err


def test_a_request_that_already_skips_gets_no_skip_hint(client, capsys, tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text('name = "x"\n[base]\nglobal_batch_size = 64\n[grid]\ngpus = [3]\n')
    code, _, err = scalelab(client, capsys, "submit", str(path), "--skip-invalid")
    assert code == cli.EXIT_USAGE
    assert "grid: no combination can run" in err and "--skip-invalid" not in err


# What the real server cannot be made to answer on demand: its own answers in words the client has never seen.
SUBMITTING = [["submit", str(EXAMPLE_REQUEST)], ["clone", "0a1b2c3d4e"]]


@pytest.mark.parametrize("argv", SUBMITTING)
@pytest.mark.parametrize(
    ("body", "command"),
    [
        ({"detail": "le planificateur ne répond pas", "experiment_id": "5f6e7d8c9b"}, "scalelab resubmit 5f6e7d8c9b"),
        # The words name an experiment and the field does not: the client goes by the field.
        ({"detail": "Slurm is down. Experiment 5f6e7d8c9b: 3 runs kept"}, "scalelab resubmit EXPERIMENT"),
    ],
)
def test_the_resubmit_hint_of_a_503_takes_the_experiment_from_its_field(capsys, argv, body, command):
    code, out, err = scalelab(answering(503, body), capsys, *argv)
    assert (code, out) == (cli.EXIT_FAILED, "")
    assert err.startswith(f"scalelab: error: {body['detail']} (HTTP 503: try again later)\n")
    assert err.rstrip().endswith(f"from the command line, later: {command}")


@pytest.mark.parametrize("argv", SUBMITTING)
@pytest.mark.parametrize(
    ("kind", "loc", "hinted"),
    [
        ("unrunnable", ["body", "grid"], True),
        # At the grid but no combination of it: the grid makes too many runs, or none can run at all.
        ("value_error", ["body", "grid"], False),
        ("value_error", ["body", "grid", "gpus", 0], False),
        ("value_error", ["body", "base", "epochs"], False),
        ("value_error", ["query", "index"], False),
    ],
)
def test_the_skip_invalid_hint_goes_by_what_a_problem_is_not_by_its_words(capsys, argv, kind, loc, hinted):
    problem = {"type": kind, "loc": loc, "msg": "ça ne peut pas tourner", "input": None}
    code, _, err = scalelab(answering(422, {"detail": [problem]}), capsys, *argv)
    assert code == cli.EXIT_USAGE
    assert "ça ne peut pas tourner" in err
    assert err.rstrip().endswith(SKIP_HINT) is hinted
    # Asked to skip already, the request has nothing more --skip-invalid could leave out.
    code, _, err = scalelab(answering(422, {"detail": [problem]}), capsys, *argv, "--skip-invalid")
    assert code == cli.EXIT_USAGE
    assert SKIP_HINT not in err


# ---- clone -------------------------------------------------------------------------------------------------------


def test_clone_previews_and_submits_the_changed_request(refusing, capsys, example):
    code, out, _ = scalelab(refusing, capsys, "submit", str(example), "-q")
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
    assert "grid: strategy=ddp, gpus=3: global_batch_size (256) must be divisible by gpus (3)" in err
    assert "--skip-invalid leaves out" in err
    assert counts(refusing) == (1, 2)

    code, out, _ = scalelab(
        refusing, capsys, "clone", original, "--set", "grid.gpus=1,3", "--skip-invalid", "--dry-run"
    )
    assert code == cli.EXIT_OK
    assert "left out 1 combination that cannot run:\n  strategy=ddp, gpus=3: global_batch_size (256)" in out

    code, _, err = scalelab(refusing, capsys, "clone", original, "--set", "base.epochs=3", "--unset", "base.epochs")
    assert (code, err) == (cli.EXIT_USAGE, "scalelab: error: base.epochs is given more than once\n")
    for argv in (["nope"], ["nope", "--dry-run"]):
        code, _, err = scalelab(refusing, capsys, "clone", *argv)
        assert (code, err) == (cli.EXIT_NOT_FOUND, "scalelab: error: no experiment 'nope'\n")


# ---- ls, watch, cancel -------------------------------------------------------------------------------------------


def test_tables_fit_the_terminal(client, capsys, session, tmp_path, monkeypatch):
    experiment = experiment_row(session, "a name long enough to need shortening on a narrow terminal " * 2)
    run_row(session, experiment, tmp_path, message="sbatch: error: " + "x" * 200)
    monkeypatch.setenv("COLUMNS", "60")
    for argv in (["ls"], ["ls", experiment.id], ["ls", "--runs", "--state", "submitted"]):
        code, out, _ = scalelab(client, capsys, *argv)
        assert code == 0
        assert out.strip() and all(len(line) <= 60 for line in out.splitlines()), out


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
        run.failure_kind = FailureKind.program_error if state is RunState.failed and read else None
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
    assert lines[-2] == "all runs ended: 1 completed, 1 failed"
    # What failed, and what to do.
    assert lines[-1] == f"1 of 2 program error. {ADVICE[FailureKind.program_error]}"
    # The experiment's total beside each run's.
    assert "0 of 2 runs ended, 1 of 4 epochs" in lines and "2 of 2 runs ended, 2 of 4 epochs" in lines


@pytest.mark.parametrize(
    ("params", "shown"),
    [
        ({"epochs": 4}, "[##########..........]  2/4 epochs"),  # the program declares its total
        ({"lr": 0.1}, "2 epochs (no total: pass it as the program's epochs parameter)"),
        ({"epochs": "4"}, "2 epochs (no total"),  # text, not a count
    ],
)
def test_a_programs_progress_shows_its_total_where_it_declares_one(params, shown):
    program = {"command": ["python", "train.py"], "workdir": "/home/u/p", "params": params}
    run = RunView.model_validate(
        {"id": "r1", "experiment_id": "e1", "state": "running", "position": 0, "scheduler": "slurm", "run_dir": "/r",
         "created_at": "2026-01-01T00:00:00Z", "spec": {"kind": "program", "strategy": "ddp", "gpus": 1,
                                                        "program": program}}
    )  # fmt: skip
    line = _progress_line(run, 2)
    assert shown in line
    assert ("[" in line) is ("epochs" in params and isinstance(params["epochs"], int))


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


# ---- resubmit ----------------------------------------------------------------------------------------------------


def test_resubmitting_an_experiment_takes_only_what_did_not_complete_and_waits_for_a_slot(
    client, capsys, session, tmp_path
):
    experiment = experiment_row(session, max_concurrent=1, request={"name": "exp", "resources": {"max_concurrent": 1}})
    failed = ended_run(session, experiment, tmp_path, "failed")
    ended_run(session, experiment, tmp_path, "done", state=RunState.completed, position=1)
    # The experiment's one slot is taken by a live run.
    run_row(session, experiment, tmp_path / "live", state=RunState.running, position=2, job_id="42")
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


# ---- export ------------------------------------------------------------------------------------------------------


def test_export_as_json_is_the_answer_as_sent_with_fields_this_client_does_not_know(capsys):
    row = {"run_id": "7db83adafd", "state": "completed", "strategy": "ddp", "gpus": 1, "epochs_done": 2}
    answer = {"experiment_id": "0a1b2c3d4e", "data": [{**row, "joules": 12.5}], "count": 1, "carbon_g": 0.2}
    code, out, _ = scalelab(answering(200, answer), capsys, "export", "0a1b2c3d4e", "--json")
    assert code == cli.EXIT_OK
    assert json.loads(out) == answer


def test_clone_sets_a_target_and_sweeps_the_learning_rate_rules(refusing, capsys, example):
    code, out, _ = scalelab(refusing, capsys, "submit", str(example), "-q")
    original = out.strip()
    target = '{"metric": "val_loss", "at_most": 0.3}'
    code, out, _ = scalelab(
        refusing, capsys, "clone", original, "--set", f"target={target}", "--set", "grid.lr_scaling=linear,sqrt"
    )
    clone = out.split()[1]
    request = refusing.get(f"/api/experiments/{clone}").json()["request"]
    assert request["target"] == {"metric": "val_loss", "at_most": 0.3}
    assert request["grid"]["lr_scaling"] == ["linear", "sqrt"]
    unreported = 'target={"metric": "grad_norm", "at_most": 1}'
    code, _, err = scalelab(refusing, capsys, "clone", original, "--set", unreported)
    assert code == cli.EXIT_USAGE
    assert "target.metric: target metric 'grad_norm': model 'mlp' does not report it" in err
