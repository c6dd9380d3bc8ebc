"""`scalelab report`: the experiment's report written to a file, or to standard output, and nothing on an error."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from client import cli
from contract.records import LaunchRecord, WorkerRecord
from tests.client.helpers import answering, scalelab
from tests.factories import epoch, experiment_row, printed_run, run_row, start

T0 = 1_764_000_000.0


@pytest.fixture
def experiment_id(client, tmp_path) -> str:
    with Session(client.app.state.engine) as session:
        experiment = experiment_row(session, "report me")
        run_row(session, experiment, tmp_path / "run")
        return experiment.id


def test_the_report_is_written_to_the_file_named(client, capsys, tmp_path, experiment_id):
    target = tmp_path / "study.html"
    code, out, err = scalelab(client, capsys, "report", experiment_id, "-o", str(target))
    assert (code, err) == (cli.EXIT_OK, "")
    html = target.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<h1>report me</h1>" in html
    assert out.startswith(f"wrote {target} (") and "no network needed" in out


def test_without_o_the_file_takes_the_servers_name(client, capsys, tmp_path, monkeypatch, experiment_id):
    monkeypatch.chdir(tmp_path)
    code, _, _ = scalelab(client, capsys, "report", experiment_id)
    assert code == cli.EXIT_OK
    assert (tmp_path / f"scalelab-{experiment_id}-report.html").is_file()


def test_o_dash_writes_to_standard_output(client, capsys, experiment_id):
    code, out, _ = scalelab(client, capsys, "report", experiment_id, "-o", "-")
    assert code == cli.EXIT_OK
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")


def test_an_unknown_experiment_is_exit_5_and_leaves_no_file(client, capsys, tmp_path):
    target = tmp_path / "study.html"
    code, out, err = scalelab(client, capsys, "report", "nope", "-o", str(target))
    assert (code, out, err) == (cli.EXIT_NOT_FOUND, "", "scalelab: error: no experiment 'nope'\n")
    assert not target.exists()


def test_a_file_that_cannot_be_written_is_a_usage_error(client, capsys, tmp_path, experiment_id):
    code, _, err = scalelab(client, capsys, "report", experiment_id, "-o", str(tmp_path / "no" / "such" / "dir.html"))
    assert code == cli.EXIT_USAGE
    assert err.startswith("scalelab: error: cannot write ") and "No such file or directory" in err


def test_an_answer_that_is_not_a_report_is_refused(capsys, tmp_path):
    target = tmp_path / "study.html"
    code, _, err = scalelab(answering(200, {"hello": "proxy"}), capsys, "report", "0a1b2c3d4e", "-o", str(target))
    assert code == cli.EXIT_FAILED
    assert "something other than scalelab's report" in err and not target.exists()


def test_help_says_what_the_report_holds_and_how_to_write_it(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["report", "--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # as read, whatever the terminal's width wrapped
    assert "-o FILE, --output FILE" in out and "- writes it to standard output" in out
    assert "scalelab report 0a1b2c3d4e -o study.html" in out and "5 no such experiment or run (HTTP 404)" in out


def test_scaling_shows_points_flags_and_the_recommendation(client, capsys, tmp_path):
    with Session(client.app.state.engine) as session:
        experiment = experiment_row(session, "scaling me")
        for gpus, seconds in [(1, 3.5), (2, 0.3), (4, 1.09)]:
            records: list[WorkerRecord] = [start(), epoch(1, 5.0), epoch(2, seconds)]
            printed_run(session, experiment, tmp_path / str(gpus), records, gpus=gpus, epochs=2)
        experiment_id = experiment.id
    code, out, err = scalelab(client, capsys, "scaling", experiment_id)
    assert (code, err) == (cli.EXIT_OK, "")
    assert "WARNING superlinear: efficiency 5.83 at 2 GPUs is above 1" in out
    assert "ddp (strong scaling, measured by epoch time; every run trains the same global batch of 64)" in out
    assert "S/EPOCH" in out
    point = next(line for line in out.splitlines() if line.startswith("2 "))
    assert point.split()[:2] == ["2", "0.3"] and "superlinear" in point
    assert "Amdahl: serial fraction" in out  # three counts: a law was fitted and read out
    # On a superlinear point no law describes, and no advice is given: the command says it was withheld.
    assert "WITHHELD: No recommendation" in " ".join(out.split())
    code, out, _ = scalelab(client, capsys, "scaling", experiment_id, "--json")
    assert code == cli.EXIT_OK and '"fits"' in out


def test_scaling_says_a_series_is_measured_by_run_time_where_its_runs_printed_no_epoch(client, capsys, tmp_path):
    with Session(client.app.state.engine) as session:
        experiment = experiment_row(session, "prints nothing")
        for gpus, seconds in [(1, 12.0), (2, 8.0)]:
            launch = [LaunchRecord(event="start", at=T0), LaunchRecord(event="end", at=T0 + seconds, exit_status=0)]
            printed_run(session, experiment, tmp_path / str(gpus), [start(), *launch], gpus=gpus, epochs=2)
        experiment_id = experiment.id
    code, out, err = scalelab(client, capsys, "scaling", experiment_id)
    assert (code, err) == (cli.EXIT_OK, "")
    assert "ddp (strong scaling, measured by run time: the wall time of each run's launches" in out
    assert "S/RUN" in out
    point = next(line for line in out.splitlines() if line.startswith("2 "))
    assert point.split()[:2] == ["2", "8"] and "1.50" in point


def test_scaling_prints_the_time_to_target_table_under_a_series_with_a_target(client, capsys, tmp_path):
    with Session(client.app.state.engine) as session:
        experiment = experiment_row(session, "to target")
        for gpus, seconds, curve in [(1, 4.0, [0.5, 0.95, 0.96, 0.97]), (2, 2.5, [0.5, 0.6, 0.95, 0.96])]:
            records: list[WorkerRecord] = [
                start(),
                *(epoch(n, seconds, val_accuracy=a) for n, a in enumerate(curve, 1)),
            ]
            target = {"metric": "val_accuracy", "at_least": 0.9}
            printed_run(session, experiment, tmp_path / str(gpus), records, gpus=gpus, epochs=4, target=target)
        experiment_id = experiment.id
    code, out, err = scalelab(client, capsys, "scaling", experiment_id)
    assert (code, err) == (cli.EXIT_OK, "")
    lines = out.splitlines()
    start_at = lines.index("time to val_accuracy >= 0.9")
    assert lines[start_at + 1].split()[:4] == ["GPUS", "BATCH", "REACHED", "S"]
    two = next(line for line in lines[start_at:] if line.startswith("2 "))
    # 2 GPUs: 7.5 s to the target at epoch 3, against 8 s at epoch 2 on 1 GPU; 1.6x the throughput.
    assert two.split()[:9] == ["2", "64", "1/1", "7.5", "1", "3", "1.07", "1.60", "0.67"]
    assert "slower_convergence" in two
    assert "2 GPUs reach val_accuracy >= 0.9 in 7.5 s" in " ".join(out.split())


def test_scaling_prints_no_time_to_target_without_a_target(client, capsys, tmp_path):
    with Session(client.app.state.engine) as session:
        experiment = experiment_row(session, "no target")
        printed_run(session, experiment, tmp_path / "1", [start(), epoch(1, 5.0), epoch(2, 2.0)], gpus=1, epochs=2)
        experiment_id = experiment.id
    code, out, _ = scalelab(client, capsys, "scaling", experiment_id)
    assert code == cli.EXIT_OK and "time to " not in out
