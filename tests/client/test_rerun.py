"""`scalelab rerun EXP --failed` against the app in-process: which runs it reruns, with which changes, and the
exit codes of what it refuses."""

from __future__ import annotations

import pytest

from client import cli
from server.models import Run
from tests.client.helpers import scalelab
from tests.server.api.test_rerun_failed import failed_grid


def answer(client, capsys, *argv: str) -> tuple[int, str, str]:
    """What the command answers, its exit code too where the command line itself is refused (argparse exits)."""
    try:
        return scalelab(client, capsys, *argv)
    except SystemExit as exit_:
        out, err = capsys.readouterr()
        return int(exit_.code or 0), out, err


WAITS = "waiting for its turn: the experiment's runs are exclusive"


def test_reruns_the_failed_of_a_kind_with_the_changes_and_says_which_original_each_repeats(
    client, capsys, session, tmp_path
):
    experiment, runs = failed_grid(session, tmp_path)
    code, out, err = scalelab(
        client,
        capsys,
        "rerun",
        experiment.id,
        "--failed",
        "--kind",
        "out_of_memory",
        "--kind",
        "time_limit",
        "--set",
        "activation_checkpointing=true",
        "--set",
        "precision=bf16",
    )
    assert (code, err) == (cli.EXIT_OK, ""), err
    lines = out.splitlines()
    assert len(lines) == 3 and lines[-1] == f"follow it with: scalelab watch {experiment.id}"
    for line, original in zip(lines[:2], (runs["oom"], runs["slow"]), strict=True):
        new_id = line.split()[1].rstrip(":")
        assert line.startswith(f"run {new_id}: a rerun of {original.id}, {WAITS}")
        new = session.get(Run, new_id)
        assert new is not None and new.rerun_of == original.id
        assert new.spec == {**original.spec, "activation_checkpointing": True, "precision": "bf16"}

    # Quiet: the ids alone; a run rerun already is rerun again when named.
    code, out, _ = scalelab(client, capsys, "rerun", experiment.id, "--failed", "--run", runs["oom"].id, "-q")
    assert code == cli.EXIT_OK and len(out.split()) == 1
    again = session.get(Run, out.strip())
    assert again is not None and again.rerun_of == runs["oom"].id


@pytest.mark.parametrize(
    ("argv", "expected", "message"),
    [
        (["--set", "global_batch_size=0"], cli.EXIT_USAGE, "set.global_batch_size: run "),
        (["--set", "base.epochs=2"], cli.EXIT_USAGE, "FIELD is a run spec's field"),
        (["--set", "epochs"], cli.EXIT_USAGE, "give FIELD=VALUE"),
        (["--set", "epochs=2", "--set", "epochs=3"], cli.EXIT_USAGE, "epochs is given more than once"),
        (["--kind", "sleepy"], cli.EXIT_USAGE, "invalid choice: 'sleepy'"),
        (["--kind", "hung"], cli.EXIT_FAILED, "no failed run of kind hung in experiment"),
    ],
)
def test_what_it_refuses_is_named_with_the_exit_code_and_nothing_is_rerun(
    client, capsys, session, tmp_path, argv, expected, message
):
    experiment, _ = failed_grid(session, tmp_path)
    code, out, err = answer(client, capsys, "rerun", experiment.id, "--failed", *argv)
    assert (code, out) == (expected, "")
    assert message in err
    assert client.get(f"/api/runs?experiment_id={experiment.id}").json()["count"] == 5


def test_failed_is_required_and_an_unknown_experiment_is_exit_5(client, capsys):
    code, _, err = answer(client, capsys, "rerun", "3f2a9c01de")
    assert code == cli.EXIT_USAGE and "the following arguments are required: --failed" in err
    code, _, err = scalelab(client, capsys, "rerun", "nowhere", "--failed")
    assert code == cli.EXIT_NOT_FOUND


def test_a_dry_run_prints_what_would_rerun_with_its_change_and_submits_nothing(client, capsys, session, tmp_path):
    experiment, runs = failed_grid(session, tmp_path)
    argv = ["rerun", experiment.id, "--failed", "--kind", "out_of_memory", "--set", "global_batch_size=32", "--dry-run"]
    code, out, err = answer(client, capsys, *argv)
    assert (code, err) == (cli.EXIT_OK, "")
    lines = out.splitlines()
    assert lines[0] == "1 failed run would run again; nothing was submitted (--dry-run)"
    assert lines[2].split() == [runs["oom"].id, "out_of_memory", "out_of_memory", "global_batch_size=32"]
    assert client.get(f"/api/runs?experiment_id={experiment.id}").json()["count"] == 5
