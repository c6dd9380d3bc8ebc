"""A user's own program on the real local Slurm, through the API: the example DDP script on 1, 2 and 4 processes
with each launcher and a parameter swept, and the faults a program brings (a missing script, a crash, no metric
line), a course script's key=value lines read while it runs, cancel and resubmit.

Every experiment is submitted at once, by one module fixture, and each test then reads its own: the runs of one
experiment take turns on the local profile's one node, but different experiments run side by side, so the whole
file takes about as long as its longest experiment.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benches.server_process import running_server
from tests.e2e.runs import output_of, wait_until_ended
from tests.e2e.test_lifecycle import metrics_of, run_of, submit, wait_until
from tests.factories import ROOT

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

EXAMPLE = ROOT / "examples" / "programs"
EXAMPLE_REQUEST = EXAMPLE / "experiment.json"
GPUS = [1, 2, 4]

# A course script's way of reporting: a set-up line, then one `key=value` line per epoch, on rank 0, standard
# library only. `--pause` makes it slow enough to be seen running.
COURSE = """
import argparse, os, time
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--pause", type=float, default=0.0)
args = parser.parse_args()
if os.environ.get("RANK", "0") == "0":
    print(f"[METRIC] gpus={os.environ['WORLD_SIZE']} world_size={os.environ['WORLD_SIZE']} strategy=ddp", flush=True)
    for epoch in range(1, args.epochs + 1):
        time.sleep(args.pause)
        print(f"[METRIC] epoch={epoch} loss={1 / epoch:.4f} val_acc={1 - 0.5 / epoch:.3f} time=0.5 throughput=900",
              flush=True)
"""
CRASH = """
print("[METRIC] epoch=1 loss=0.9 time=0.1", flush=True)
print("reading the data set", flush=True)
raise RuntimeError("no data in /datasets/imagenet-tiny: copy it there first")
"""
QUIET = """
print("training... done, but no metric line", flush=True)
"""
# A script whose parser takes no option at all, as many do: an unknown --epochs stops it (exit 2). It reads its
# parameter from the environment, as params_style "env" gives it.
STRICT = """
import argparse, os
argparse.ArgumentParser().parse_args()
for epoch in range(1, int(os.environ["SCALELAB_PARAM_EPOCHS"]) + 1):
    print(f"[METRIC] epoch={epoch} loss={1 / epoch:.4f} time=0.1", flush=True)
"""


def program_request(name: str, workdir: Path, command: list[str], **program: Any) -> dict[str, Any]:
    return {
        "name": name,
        "base": {"kind": "program", "strategy": "ddp", "gpus": 1,
                 "program": {"command": command, "workdir": str(workdir), **program}},
        "resources": {"nodes": 1, "time_limit": "00:10:00"},
    }  # fmt: skip


def example_request(launcher: str) -> dict[str, Any]:
    """examples/programs/experiment.json with this checkout as its workdir; torchrun is the file's own launcher."""
    request: dict[str, Any] = json.loads(EXAMPLE_REQUEST.read_text())
    request["base"]["program"]["workdir"] = str(EXAMPLE)
    if launcher != "torchrun":
        # The other launcher over the same GPU counts, one learning rate and a narrower network given as a
        # parameter: the sweep above is the file's.
        request["name"] += f", {launcher}"
        request["base"]["program"].update(launcher=launcher, params={"hidden": 32})
        request["grid"] = {"gpus": GPUS}
    return request


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("program-e2e")


@pytest.fixture(scope="module")
def programs(work: Path) -> Path:
    """A user's project directory with their small programs in it (and, on purpose, without late.py)."""
    folder = work / "project"
    folder.mkdir()
    for name, text in {"course.py": COURSE, "crash.py": CRASH, "quiet.py": QUIET, "strict.py": STRICT}.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder


@pytest.fixture(scope="module")
def server(slurm: None, work: Path, programs: Path) -> Iterator[str]:
    # The checkout (the example) and the test's project are where programs may run from: root's home is neither.
    env = {"SCALELAB_POLL_INTERVAL_S": "1", "SCALELAB_PROGRAM_ROOTS": f"{ROOT}:{programs}"}
    with running_server(work, "slurm", env) as url:
        yield url


@pytest.fixture(scope="module")
def experiments(server: str, programs: Path) -> dict[str, dict[str, Any]]:
    """Every experiment of the file, submitted before any test waits on one."""
    requests = {
        "torchrun": example_request("torchrun"),
        "srun": example_request("srun"),
        "course": program_request("live course lines", programs, ["python", "course.py"],
                                  params={"epochs": 1000, "pause": 0.5}),
        "env": program_request("parameters by the environment", programs, ["python", "strict.py"],
                               params={"epochs": 2}, params_style="env"),
        "flags": program_request("parameters as flags", programs, ["python", "strict.py"], params={"epochs": 2}),
        "crash": program_request("crashes", programs, ["python", "crash.py"]),
        "quiet": program_request("prints no metric", programs, ["python", "quiet.py"], launcher="torchrun"),
    }  # fmt: skip
    return {name: submit(server, request) for name, request in requests.items()}


def ended(server: str, experiment: dict[str, Any], work: Path) -> list[dict[str, Any]]:
    """The experiment's runs once each has ended and been read to its end, in the order it made them."""
    return [wait_until_ended(server, run["id"], work / "server.log", timeout_s=300) for run in experiment["runs"]]


def compare(server: str, experiment: dict[str, Any]) -> dict[str, Any]:
    url = f"{server}/api/compare"
    response = httpx.get(url, params={"experiment_id": experiment["id"], "history": "true"}, timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def scaling(server: str, experiment: dict[str, Any]) -> list[dict[str, Any]]:
    response = httpx.get(f"{server}/api/experiments/{experiment['id']}/scaling", timeout=10)
    assert response.status_code == 200, response.text
    return list(response.json()["series"])


def check_example_runs(server: str, experiment: dict[str, Any], work: Path, epochs: int) -> dict[str, Any]:
    """Each run completed on as many processes as it asked for, and its figures (and grad_norm) compare."""
    runs = ended(server, experiment, work)
    failed = {run["id"]: output_of(server, run["id"]) for run in runs if run["state"] != "completed"}
    assert not failed, ([run["message"] for run in runs], failed)  # the whole output: the cause may come early
    for run in runs:
        gpus = run["spec"]["gpus"]
        # What the program itself saw: WORLD_SIZE from the launcher, --lr from the params.
        output = output_of(server, run["id"])
        assert f"training on {gpus} process(es)" in output, output
        assert f"lr={run['spec']['program']['params'].get('lr', 0.05)}" in output, output
        records = metrics_of(server, run["id"])
        # The program prints no start record: the batch script printed one from the spec.
        assert records[0]["kind"] == "start", records[:2]
        assert (records[0]["world_size"], records[0]["strategy"]) == (gpus, "ddp")
        assert [record["epoch"] for record in records if record["kind"] == "epoch"] == list(range(1, epochs + 1))

    table = compare(server, experiment)
    assert table["metric_names"] == ["grad_norm"]
    rows = table["data"]
    assert sorted(row["gpus"] for row in rows) == sorted(run["spec"]["gpus"] for run in runs)
    for row in rows:
        assert row["epochs_done"] == epochs and row["mean_epoch_time_s"] > 0, row
        assert row["final_val_accuracy"] > 0.5 and row["peak_memory_bytes"] > 0, row
        assert row["speedup"] is not None and row["metrics"]["grad_norm"] > 0, row
        history = table["histories"][row["run_id"]]
        assert [point["epoch"] for point in history] == list(range(1, epochs + 1))
        assert all(point["metrics"]["grad_norm"] > 0 for point in history), history
    return table


def test_the_example_sweeps_gpus_and_learning_rate_under_torchrun(server, experiments, work):
    experiment = experiments["torchrun"]
    request = json.loads(EXAMPLE_REQUEST.read_text())
    lrs = request["grid"]["params.lr"]
    assert sorted((run["spec"]["gpus"], run["spec"]["program"]["params"]["lr"]) for run in experiment["runs"]) == [
        (gpus, lr) for gpus in GPUS for lr in lrs
    ]
    table = check_example_runs(server, experiment, work, epochs=3)
    # One series per learning rate, each measured against its own single process.
    assert len({row["series"] for row in table["data"]}) == len(lrs)
    assert all(row["baseline_gpus"] == 1 for row in table["data"])
    series = scaling(server, experiment)
    assert len(series) == len(lrs)
    for each in series:
        assert [point["gpus"] for point in each["points"]] == GPUS, each
        assert each["points"][0]["speedup"] == pytest.approx(1.0)
        assert each["fits"]["amdahl"] is not None or each["fits"]["refused"], each


def test_the_example_runs_under_srun_with_a_fixed_parameter(server, experiments, work):
    experiment = experiments["srun"]
    table = check_example_runs(server, experiment, work, epochs=3)
    assert len({row["series"] for row in table["data"]}) == 1
    (series,) = scaling(server, experiment)
    assert [point["gpus"] for point in series["points"]] == GPUS
    # --hidden 32 reached every process: the model is built from it on each rank alike, or DDP would refuse.
    assert all("hidden=32" in output_of(server, run["id"]) for run in experiment["runs"])


def test_course_lines_are_read_while_the_program_runs_and_a_running_run_cancels(server, experiments, work):
    run_id = experiments["course"]["runs"][0]["id"]

    def two_epochs_while_running() -> bool:
        run = run_of(server, run_id)
        epochs = [record for record in metrics_of(server, run_id) if record["kind"] == "epoch"]
        assert run["state"] not in ("completed", "failed", "cancelled"), run
        return run["state"] == "running" and len(epochs) >= 2

    wait_until("the course script's epochs were read while it ran", two_epochs_while_running, 240, work / "server.log")
    response = httpx.post(f"{server}/api/runs/{run_id}/cancel", timeout=30)
    assert response.status_code == 202, response.text
    run = wait_until_ended(server, run_id, work / "server.log", timeout_s=120)
    assert run["state"] == "cancelled"
    epochs = [record for record in metrics_of(server, run_id) if record["kind"] == "epoch"]
    # The course names mapped to ours: loss is train_loss, val_acc val_accuracy, time epoch_time_s.
    assert epochs[0]["train_loss"] == 1.0 and epochs[0]["val_accuracy"] == 0.5 and epochs[0]["epoch_time_s"] == 0.5
    assert [record["epoch"] for record in epochs] == list(range(1, len(epochs) + 1))


def test_a_missing_script_is_refused_at_submission_and_runs_once_it_is_there(server, programs, work):
    """Caught before queueing, at its field; the batch script's own check (for a file gone by the time the job
    starts) is tested in tests/server/test_render_program_run.py."""
    request = program_request("forgot to copy it", programs, ["python", "late.py"], params={"epochs": 2})
    response = httpx.post(f"{server}/api/experiments", json=request, timeout=60)
    assert response.status_code == 422, response.text
    ((loc, message),) = [(error["loc"], error["msg"]) for error in response.json()["detail"]]
    assert loc == ["body", "base", "program", "command"], loc
    assert f"the program file late.py does not exist in {programs}" in message, message

    # The user copies the script in and submits again.
    (programs / "late.py").write_text(textwrap.dedent(COURSE))
    experiment = submit(server, request)
    (run,) = ended(server, experiment, work)
    assert run["state"] == "completed", run
    assert [record["epoch"] for record in metrics_of(server, run["id"]) if record["kind"] == "epoch"] == [1, 2]
    (row,) = compare(server, experiment)["data"]
    assert row["epochs_done"] == 2 and row["final_val_accuracy"] == 0.75


def test_params_style_env_runs_a_script_whose_parser_refuses_unknown_flags(server, experiments, work):
    (run,) = ended(server, experiments["env"], work)
    assert run["state"] == "completed", (run, output_of(server, run["id"]))
    assert [record["epoch"] for record in metrics_of(server, run["id"]) if record["kind"] == "epoch"] == [1, 2]
    # The same script given its parameter as a flag, today's default, stops at its parser.
    (run,) = ended(server, experiments["flags"], work)
    assert run["state"] == "failed", run
    assert "unrecognized arguments: --epochs 2" in run["message"], run["message"]


def test_a_program_that_exits_non_zero_fails_with_the_tail_of_its_output(server, experiments, work):
    run = ended(server, experiments["crash"], work)[0]
    assert run["state"] == "failed", run
    message = run["message"]
    assert "code 1" in message, message
    assert "reading the data set" in message and "RuntimeError: no data in /datasets/imagenet-tiny" in message
    assert "[METRIC]" not in message, "metric lines are figures, not what went wrong"


def test_a_program_that_prints_no_metric_completes_with_a_warning_and_a_flag(server, experiments, work):
    run = ended(server, experiments["quiet"], work)[0]
    assert run["state"] == "completed", run
    assert "[METRIC]" in run["message"] and "contract/metrics.py" in run["message"], run["message"]
    (row,) = compare(server, experiments["quiet"])["data"]
    flags = {flag["code"]: flag for flag in row["flags"]}
    assert flags["no_metrics"]["severity"] == "warning", row["flags"]
    assert row["epochs_done"] == 0 and row["mean_epoch_time_s"] is None
