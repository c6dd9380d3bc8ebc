"""`scalelab program`: the request its options build, its refusals of bad input (exit 2, saying what to type), and
its preview and submission against the app in-process, as `scalelab submit` prints them."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from client import cli
from client.programs import program_request
from contract.states import RunState
from server.models import Experiment, Run
from server.services import users
from tests.client.helpers import scalelab
from tests.conftest import bearer, make_client
from tests.server.api.test_experiments import counts


@pytest.fixture
def programs(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text("print('training')\n")
    return root


@pytest.fixture
def rooted(settings, local_scheduler, programs):
    """The app, letting programs run from `programs` (as SCALELAB_PROGRAM_ROOTS does)."""
    with make_client(settings.model_copy(update={"program_roots": [str(programs)]}), local_scheduler) as client:
        yield client


def parsed(*argv: str):
    return cli.build_parser().parse_args(["program", *argv])


def test_the_options_build_the_request_a_program_experiment_takes():
    args = parsed(
        *("--name", "mine", "--workdir", "proj/../proj2", "--launcher", "torchrun", "--gpus", "1,2,4"),
        *("--nodes", "1", "--strategy", "fsdp", "--param", "lr=0.05,0.1", "--param", "opt=adam", "--param", "amp=true"),
        *("--env", "OMP_NUM_THREADS=1", "--env", "NOTE=a b=c, d", "--image", "docker://me/img:1"),
        *("--profile", "local", "--time-limit", "00:05:00", "--"),
        *("python", "train.py", "--epochs", "3"),
    )
    assert program_request(args, "/home/alice") == {
        "name": "mine",
        "base": {
            "kind": "program",
            "strategy": "fsdp",
            "program": {
                # Everything after -- as the shell split it, options of the program's own included.
                "command": ["python", "train.py", "--epochs", "3"],
                "workdir": "/home/alice/proj2",  # made absolute from where the command runs
                "launcher": "torchrun",
                "image": "docker://me/img:1",
                "env": {"OMP_NUM_THREADS": "1", "NOTE": "a b=c, d"},
                "params": {"opt": "adam", "amp": True},  # one value: fixed
            },
        },
        "grid": {"params.lr": [0.05, 0.1], "gpus": [1, 2, 4]},  # several: swept
        "resources": {"profile": "local", "nodes": 1, "time_limit": "00:05:00"},
    }


def test_the_defaults_are_this_directory_srun_and_the_command_as_name():
    request = program_request(parsed("--gpus", "2", "--", "python", "-m", "my pkg"), "/home/alice/proj")
    assert request == {
        "name": "python -m 'my pkg'",
        "base": {
            "kind": "program",
            "gpus": 2,
            "program": {"command": ["python", "-m", "my pkg"], "workdir": "/home/alice/proj", "launcher": "srun"},
        },
        "grid": {},
        "resources": {},
    }


def test_cwd_run_dir_is_sent_and_the_default_left_out():
    request = program_request(parsed("--cwd", "run_dir", "--", "python", "train.py"), "/home/alice/proj")
    assert request["base"]["program"]["cwd"] == "run_dir"
    assert "cwd" not in program_request(parsed("--", "python", "train.py"), "/p")["base"]["program"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--param", "LR=0.1"], "'LR' is not a parameter name: lower-case letters"),
        (["--param", "lr"], "'lr': give NAME=VALUE or NAME=V1,V2 to sweep, e.g. --param lr=0.05,0.1"),
        (["--param", "lr=0.1,"], "'lr=0.1,': an empty value in the list"),
        (["--param", "lr=1,1"], "'lr=1,1': a value is listed twice"),
        (["--env", "1X=2"], "'1X' is not a variable name"),
        (["--env", "OMP_NUM_THREADS"], "give NAME=VALUE, e.g. --env OMP_NUM_THREADS=1"),
        (["--gpus", "0,2"], "GPU counts are 1 or more, each listed once"),
        (["--gpus", "two"], "give GPU counts separated by commas, e.g. 1,2,4"),
        (["--launcher", "mpirun"], "invalid choice: 'mpirun'"),
        (["--cwd", "home"], "invalid choice: 'home'"),
    ],
)
def test_bad_options_are_exit_2_and_say_what_to_type(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["program", *argv, "--", "python", "train.py"])
    assert exit_.value.code == cli.EXIT_USAGE
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give the program's command after --, e.g. scalelab program -- python train.py"),
        (["--param", "lr=1", "--param", "lr=2", "--", "x"], "--param lr is given twice"),
        (["--param", "lr=1,2", "--param", "lr=3", "--", "x"], "--param lr is given twice"),
        (["--env", "A=1", "--env", "A=2", "--", "x"], "--env A is given twice"),
    ],
)
def test_a_missing_command_or_a_name_given_twice_is_exit_2(client, capsys, argv, message):
    code, out, err = scalelab(client, capsys, "program", *argv)
    assert (code, out) == (cli.EXIT_USAGE, "")
    assert err == f"scalelab: error: {message}\n"
    assert counts(client) == (0, 0)


def test_what_the_server_refuses_is_exit_2_naming_the_field(rooted, capsys, programs):
    code, _, err = scalelab(rooted, capsys, "program", "--workdir", str(programs), "--env", "WORLD_SIZE=8", "--", "x")
    assert code == cli.EXIT_USAGE
    assert "base.program.env" in err and "WORLD_SIZE" in err
    code, _, err = scalelab(rooted, capsys, "program", "--workdir", "/etc", "--dry-run", "--", "python", "train.py")
    assert code == cli.EXIT_USAGE
    assert "base.program.workdir" in err and str(programs) in err  # where it may run from instead
    assert counts(rooted) == (0, 0)


@pytest.mark.parametrize(
    ("command", "words"),
    [
        (["python", "trian.py"], "base.program.command: the program file trian.py does not exist in"),
        (["python train.py 5 10"], 'did you mean ["python", "train.py", "5", "10"]?'),
    ],
)
def test_mistakes_a_queued_job_would_meet_are_exit_2_at_submission(rooted, capsys, programs, command, words):
    for dry_run in ([], ["--dry-run"]):
        code, out, err = scalelab(rooted, capsys, "program", "--workdir", str(programs), *dry_run, "--", *command)
        assert (code, out) == (cli.EXIT_USAGE, ""), err
        assert words in err and "base.program.command" in err
    assert counts(rooted) == (0, 0)


def test_the_workdir_is_taken_from_where_the_command_runs_and_tilde_is_the_home(monkeypatch):
    monkeypatch.setenv("HOME", "/home/alice")
    # A shell expands ~ only at a word's start: --workdir=~/proj reaches the command as it is.
    assert program_request(parsed("--workdir=~/proj", "--", "x"), "/tmp/elsewhere")["base"]["program"]["workdir"] == (
        "/home/alice/proj"
    )
    assert program_request(parsed("--workdir", "sub", "--", "x"), "/home/alice/proj")["base"]["program"]["workdir"] == (
        "/home/alice/proj/sub"
    )


def test_params_style_env_is_sent_only_when_chosen():
    assert "params_style" not in program_request(parsed("--", "x"), "/")["base"]["program"]
    program = program_request(parsed("--params-style", "env", "--param", "lr=0.1", "--", "x"), "/")["base"]["program"]
    assert (program["params_style"], program["params"]) == ("env", {"lr": 0.1})


def test_a_plain_user_where_jobs_run_as_the_service_is_told_why_and_exit_is_not_zero(rooted, capsys, programs):
    """The local scheduler runs every job as the service's account: only admins run programs there. The server's
    reason is printed as it placed it (base.kind), for a preview as for a submission."""
    with Session(rooted.app.state.engine) as session:
        bob = TestClient(rooted.app, headers=bearer(users.add_user(session, "bob")))
    for dry_run in ([], ["--dry-run"]):
        code, out, err = scalelab(bob, capsys, "program", "--workdir", str(programs), *dry_run, "--", "python", "x.py")
        assert (code, out) == (cli.EXIT_USAGE, "")
        assert "base.kind: bob may not run a program" in err and "only admins may run programs" in err
    assert counts(rooted) == (0, 0)
    # Resubmitting is refused alike (a run made while programs were everyone's): the reason, never the token.
    experiment = rooted.post(
        "/api/experiments", json=program_request(parsed("--workdir", str(programs), "--", "x"), "/")
    )
    assert experiment.status_code == 201, experiment.text
    with Session(rooted.app.state.engine) as session:
        made_for_bob = session.get(Experiment, experiment.json()["id"])
        assert made_for_bob is not None
        made_for_bob.owner = "bob"
        session.add(made_for_bob)
        for made in experiment.json()["runs"]:
            run = session.get(Run, made["id"])
            assert run is not None
            run.owner, run.state, run.job_id = "bob", RunState.failed, None
            session.add(run)
        session.commit()
    code, _, err = scalelab(bob, capsys, "resubmit", experiment.json()["runs"][0]["id"])
    assert code == cli.EXIT_FAILED, err
    assert "bob may not run a program" in err and "token" not in err


def test_dry_run_prints_the_runs_by_gpus_and_parameter_and_a_script(rooted, capsys, programs):
    argv = ["program", "--workdir", str(programs), "--gpus", "1,2", "--param", "lr=0.05,0.1", "--dry-run"]
    code, out, err = scalelab(rooted, capsys, *argv, "--script", "3", "--", "python", "train.py")
    assert code == cli.EXIT_OK, err
    assert out.startswith('experiment "python train.py": 4 runs; nothing was submitted (--dry-run)\n')
    every = out[out.index("every run:") : out.index("#  gpus")]
    assert (
        f"strategy=ddp nodes=1 seed=0 kind=program command=python train.py workdir={programs} launcher=srun"
        in " ".join(every.split())
    )
    assert "model=" not in out  # the worker's settings are not a program's
    table = out[out.index("#  gpus") :].splitlines()
    assert table[0].split() == ["#", "gpus", "params.lr"]
    assert [line.split() for line in table[1:5]] == [
        ["0", "1", "0.05"],
        ["1", "1", "0.1"],
        ["2", "2", "0.05"],
        ["3", "2", "0.1"],
    ]
    assert "batch script of run 3" in out and "train.py" in out[out.index("#!/bin/bash") :]
    assert counts(rooted) == (0, 0)


def test_submit_prints_the_experiment_as_submit_does_and_keeps_the_request(rooted, capsys, programs):
    argv = ["program", "--workdir", str(programs), "--param", "lr=0.1", "-q", "--", "python", "train.py"]
    code, out, err = scalelab(rooted, capsys, *argv)
    assert code == cli.EXIT_OK, err
    experiment = rooted.get(f"/api/experiments/{out.strip()}").json()
    assert experiment["request"]["base"]["program"]["params"] == {"lr": 0.1}
    (run,) = rooted.get(f"/api/runs?experiment_id={experiment['id']}").json()["data"]
    code, out, _ = scalelab(rooted, capsys, "show", run["id"])
    assert code == cli.EXIT_OK
    assert "command=python train.py" in out and "params.lr=0.1" in out and "epochs=" not in out
