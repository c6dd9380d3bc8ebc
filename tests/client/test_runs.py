"""The commands about one run against the app in-process: show, logs, events."""

from __future__ import annotations

from client import cli
from contract.states import RunState
from server.models import Run
from tests.client.helpers import advance_on_sleep, ended_run, scalelab, shown
from tests.factories import experiment_row, run_row
from tests.server.api.test_runs import until_final


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


def test_events_of_a_run_without_any_and_of_no_run(client, capsys, session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path)
    code, out, _ = scalelab(client, capsys, "events", run.id)
    assert (code, out) == (cli.EXIT_OK, f"no events recorded for run {run.id}\n")
    code, _, err = scalelab(client, capsys, "events", "nope")
    assert (code, err) == (cli.EXIT_NOT_FOUND, "scalelab: error: no run 'nope'\n")


def test_unknown_ids_are_exit_5(client, capsys):
    for argv in (["ls", "nope"], ["show", "nope"], ["logs", "nope"], ["watch", "nope"], ["export", "nope"]):
        code, _, err = scalelab(client, capsys, *argv)
        assert code == cli.EXIT_NOT_FOUND, argv
        assert "nope" in err
