"""A user's own program as an experiment, through the API: its grid of parameters, where it may run and in what,
how it is followed to its end, and how its runs compare (custom metrics, series by parameter, flags).

The previews render the batch script (server/render.py): they need a renderer that takes program runs. The refusals
are all decided before anything is rendered, and the runs followed and compared here are made by hand.
"""

from __future__ import annotations

import csv
import io
import os
import pwd
import time
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from contract.records import EpochRecord, WorkerRecord, format_record
from contract.rundir import OUTPUT_FILE
from contract.spec import RunSpec
from contract.states import RunState
from server.config import Settings
from server.models import Run
from server.monitor import Monitor
from server.scheduler.slurm import SlurmScheduler
from server.services.experiments import PROGRAM_NOT_ESTIMATED
from server.services.ingestion.parsing import ingest
from server.services.programs import EXIT_ABORT_HINT, TAIL_BYTES, TAIL_LINES
from tests.conftest import make_client
from tests.factories import epoch, experiment_row, printed_run, run_row, start

EXAMPLE_PROFILES = Path(__file__).resolve().parents[3] / "examples" / "profiles"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A program root (SCALELAB_PROGRAM_ROOTS) holding a project directory with its script (the server looks for the
    file the command names where it sees the workdir)."""
    (tmp_path / "programs" / "proj").mkdir(parents=True)
    (tmp_path / "programs" / "proj" / "train.py").write_text("print('training')\n")
    return tmp_path / "programs"


@pytest.fixture
def program_settings(settings: Settings, root: Path) -> Settings:
    return settings.model_copy(update={"program_roots": [root], "profiles_dir": EXAMPLE_PROFILES})


@pytest.fixture
def program_client(program_settings, local_scheduler):
    with make_client(program_settings, local_scheduler) as client:
        yield client


def program_request(root: Path, **changes: Any) -> dict[str, Any]:
    """The design's example request: a DDP script swept over GPUs and a learning rate, under the root."""
    program = {
        "command": ["python", "train.py", "--epochs", "3"],
        "workdir": str(root / "proj"),
        "launcher": "torchrun",
        "env": {"OMP_NUM_THREADS": "1"},
        "params": {"lr": 0.05, "hidden": 32},
    }
    request: dict[str, Any] = {
        "name": "my DDP script",
        "base": {"kind": "program", "strategy": "ddp", "program": program},
        "grid": {"gpus": [1, 2], "params.lr": [0.05, 0.1]},
        "resources": {"nodes": 1, "time_limit": "00:10:00"},
        "isolation": "shared",
    }
    for section, fields in changes.items():
        if isinstance(fields, dict) and isinstance(request.get(section), dict):
            request[section] = {**request[section], **fields}
        else:
            request[section] = fields
    return request


def with_program(root: Path, **program: Any) -> dict[str, Any]:
    request = program_request(root)
    request["base"]["program"] = {**request["base"]["program"], **program}
    return request


def under(root: Path, change: dict[str, Any]) -> dict[str, Any]:
    """The program fields with ROOT in their text the program root."""
    return {key: value.replace("ROOT", str(root)) if isinstance(value, str) else value for key, value in change.items()}


def refusal(response) -> list[tuple[tuple, str]]:
    assert response.status_code == 422, response.text
    return [(tuple(error["loc"]), error["msg"]) for error in response.json()["detail"]]


def nothing_created(client, settings: Settings) -> bool:
    runs = client.get("/api/runs").json()["count"]
    return runs == 0 and (not settings.runs_dir.exists() or not any(settings.runs_dir.iterdir()))


# ---- the request and its grid -------------------------------------------------------------------------------------


def test_the_grid_sweeps_parameters_beside_gpus_and_the_preview_estimates_no_memory(program_client, root):
    """Needs the renderer to take program runs (the preview renders the first run's script)."""
    response = program_client.post("/api/experiments/preview", json=program_request(root))
    assert response.status_code == 200, response.text
    preview = response.json()
    runs = [(run["gpus"], run["program"]["params"]) for run in preview["runs"]]
    # The swept value replaces the base's; the base's other parameters stay, in their order.
    assert runs == [
        (1, {"lr": 0.05, "hidden": 32}),
        (1, {"lr": 0.1, "hidden": 32}),
        (2, {"lr": 0.05, "hidden": 32}),
        (2, {"lr": 0.1, "hidden": 32}),
    ]
    assert {run["kind"] for run in preview["runs"]} == {"program"}
    assert [(item["estimate"], item["warning"]) for item in preview["estimates"]] == [(None, PROGRAM_NOT_ESTIMATED)] * 4


def test_a_parameter_swept_without_one_in_base_is_added(program_client, root):
    """Needs the renderer to take program runs."""
    request = with_program(root, params={})
    request["grid"] = {"params.batch_size": [16, 32]}
    response = program_client.post("/api/experiments/preview", json=request)
    assert response.status_code == 200, response.text
    assert [run["program"]["params"] for run in response.json()["runs"]] == [{"batch_size": 16}, {"batch_size": 32}]


@pytest.mark.parametrize(
    ("change", "loc", "words"),
    [
        # Caught at submission, not after queueing (issue 31): said in words, at the field.
        ({"workdir": "proj"}, ("body", "base", "program", "workdir"), "must be an absolute path (starting with /)"),
        (
            {"command": ["python", "trian.py"]},
            ("body", "base", "program", "command"),
            "the program file trian.py does not exist in ROOT/proj",
        ),
        ({"command": ["./run.sh"]}, ("body", "base", "program", "command"), "the program file ./run.sh does not exist"),
        ({"command": ["python", "."]}, ("body", "base", "program", "command"), "the program file . is not a file"),
        (
            {"command": ["python train.py 5 10"]},
            ("body", "base", "program", "command"),
            'did you mean ["python", "train.py", "5", "10"]?',
        ),
        ({"workdir": "ROOT/proj/../../etc"}, ("body", "base", "program", "workdir"), "'..'"),
        ({"workdir": "/etc"}, ("body", "base", "program", "workdir"), "not under a program root"),
        ({"workdir": "ROOT/../elsewhere"}, ("body", "base", "program", "workdir"), "'..'"),
        ({"env": {"RANK": "3"}}, ("body", "base", "program", "env"), "RANK: set by Slurm"),
        ({"env": {"SLURM_NTASKS": "3"}}, ("body", "base", "program", "env"), "SLURM_NTASKS"),
        ({"env": {"MY VAR": "1"}}, ("body", "base", "program", "env", "MY VAR", "[key]"), "pattern"),
        ({"params": {"Learning-Rate": 1}}, ("body", "base", "program", "params", "Learning-Rate", "[key]"), "pattern"),
        ({"params": {"lr": [1, 2]}}, ("body", "base", "program", "params", "lr"), "valid"),
        ({"command": []}, ("body", "base", "program", "command"), "at least 1"),
        ({"command": ["python", "a\nb"]}, ("body", "base", "program", "command"), "control characters"),
        ({"env": {"GREETING": "hi\nthere"}}, ("body", "base", "program", "env"), "control characters"),
        ({"params": {"name": "a\rb"}}, ("body", "base", "program", "params"), "control characters"),
        ({"image": "repo/image:1"}, ("body", "base", "program", "image"), "no image"),
        ({"launcher": "mpirun"}, ("body", "base", "program", "launcher"), "srun"),
        # What would change how the batch script itself runs, since the env is exported there (contract.program).
        ({"env": {"BASH_ENV": "/tmp/x"}}, ("body", "base", "program", "env"), "BASH_ENV: bash runs the file"),
        ({"env": {"ENV": "/tmp/x"}}, ("body", "base", "program", "env"), "ENV: sh, and bash in POSIX mode"),
        ({"env": {"SHELLOPTS": "xtrace"}}, ("body", "base", "program", "env"), "SHELLOPTS: bash turns on"),
        ({"env": {"IFS": "/"}}, ("body", "base", "program", "env"), "IFS: changes how the batch script splits"),
        ({"env": {"PS4": "$(id)"}}, ("body", "base", "program", "env"), "PS4: bash expands it"),
        ({"env": {"PATH": "/tmp"}}, ("body", "base", "program", "env"), "PATH: changes which srun"),
        ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, ("body", "base", "program", "env"), "LD_PRELOAD: the dynamic loader"),
        ({"env": {"LD_AUDIT": "/tmp/x.so"}}, ("body", "base", "program", "env"), "LD_AUDIT: the dynamic loader"),
        ({"env": {"LD_LIBRARY_PATH": "/x"}}, ("body", "base", "program", "env"), "LD_LIBRARY_PATH: the dynamic"),
        ({"env": {"GLIBC_TUNABLES": "x"}}, ("body", "base", "program", "env"), "GLIBC_TUNABLES: the C library"),
        ({"env": {"TOKEN": "(hidden)"}}, ("body", "base", "program", "env"), "TOKEN: (hidden) stands for a value"),
    ],
)
def test_a_bad_program_is_refused_naming_its_field(program_client, program_settings, root, change, loc, words):
    change = under(root, change)
    for route in ("/api/experiments/preview", "/api/experiments"):
        problems = refusal(program_client.post(route, json=with_program(root, **change)))
        words = words.replace("ROOT", str(root))
        assert any(found[: len(loc)] == loc and words in message for found, message in problems), problems
    assert nothing_created(program_client, program_settings)


@pytest.mark.parametrize(
    "change",
    [
        {"workdir": "ROOT/not-made-yet"},  # a workdir the server does not see: the batch script checks on the node
        {"command": ["python", "-m", "pkg.train"]},  # a module, found by Python
        {"command": ["torchrun", "train.py"]},  # a bare command, found on the task's PATH
        {"command": ["/opt/bin/train"]},  # absolute: the node's or the image's, not this machine's
        {"command": ["python", "train.py", "--name", "my run"]},  # spaces in an argument are the argument's
    ],
)
def test_what_the_server_cannot_see_is_left_to_the_batch_script(program_client, root, change):
    response = program_client.post("/api/experiments/preview", json=with_program(root, **under(root, change)))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("change", "loc", "words"),
    [
        ({"base": {"model": "cnn"}}, ("body", "base", "model"), "does not apply to a program"),
        ({"base": {"global_batch_size": 64}}, ("body", "base", "global_batch_size"), "program.params"),
        ({"grid": {"lr": [0.1, 0.2]}}, ("body", "grid", "lr"), "sweep it as params.lr"),
        ({"grid": {"params.LR": [1]}}, ("body", "grid", "params.LR"), "params.NAME"),
        ({"grid": {"params.lr": []}}, ("body", "grid", "params.lr"), "at least 1"),
        ({"grid": {"program": [{}]}}, ("body", "grid", "program"), "cannot be swept"),
        ({"grid": {"flavour": ["x"]}}, ("body", "grid", "flavour"), "cannot be swept"),
        ({"scaling": "weak"}, ("body", "scaling"), "a program's batch is its own"),
        ({"base": {"kind": "program", "strategy": "ddp"}}, ("body", "base", "program"), "needs its program"),
    ],
)
def test_a_program_experiment_sets_only_what_a_program_reads(program_client, root, change, loc, words):
    request = program_request(root, **change)
    if change.get("base", {}).get("kind") == "program":
        request["base"] = change["base"]  # without its program
    problems = refusal(program_client.post("/api/experiments/preview", json=request))
    assert any(found == loc and words in message for found, message in problems), problems


def test_program_parts_in_an_experiment_of_another_kind_are_refused(program_client, root):
    request = {
        "name": "worker",
        "base": {"model": "mlp", "strategy": "ddp", "program": program_request(root)["base"]["program"]},
        "grid": {"gpus": [1, 2], "params.lr": [0.1]},
    }
    problems = refusal(program_client.post("/api/experiments/preview", json=request))
    locs = [found for found, _ in problems]
    assert ("body", "grid", "params.lr") in locs and ("body", "base", "program") in locs
    assert all("set base.kind to 'program'" in message for _, message in problems), problems


def test_a_link_out_of_the_roots_is_refused_and_one_within_them_is_not(program_client, root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    (root / "alias").symlink_to(root / "proj")
    problems = refusal(
        program_client.post("/api/experiments/preview", json=with_program(root, workdir=f"{root}/escape"))
    )
    assert problems == [
        (("body", "base", "program", "workdir"), f"{root}/escape is not under a program root of profile local "
         f"({_home()}, {root}), with links followed: put the program under one, or have the server's operator add "
         "its directory to SCALELAB_PROGRAM_ROOTS")
    ]  # fmt: skip
    # Within the roots a link is as good as its target: only the image is wrong in this request.
    request = with_program(root, workdir=f"{root}/alias/sub", image="x:1")
    assert [found for found, _ in refusal(program_client.post("/api/experiments/preview", json=request))] == [
        ("body", "base", "program", "image")
    ]


def _home() -> Path:
    return Path(pwd.getpwuid(os.getuid()).pw_dir)


def test_the_local_profile_takes_programs_from_the_home_of_the_account_jobs_run_as(settings, local_scheduler):
    """No SCALELAB_PROGRAM_ROOTS: the local profile's "~" is the service's own home, as its jobs run as it."""
    with make_client(settings, local_scheduler) as client:
        profile = client.get("/api/profiles/local").json()
        assert profile["program_roots"] == ["~"]
        home = _home()
        # Only the image is refused: the home itself and what lies below it are roots.
        for workdir in (home, home / "project"):
            request = program_request(Path("/unused"))
            # A module, not a file: the home holds no train.py, and the roots are what this test is about.
            request["base"]["program"] |= {"workdir": str(workdir), "image": "x:1", "command": ["python", "-m", "t"]}
            assert [loc for loc, _ in refusal(client.post("/api/experiments/preview", json=request))] == [
                ("body", "base", "program", "image")
            ]


def test_the_servers_program_roots_are_added_to_every_profile(program_client, root):
    profiles = {name: program_client.get(f"/api/profiles/{name}").json() for name in ("local", "podman", "cscs")}
    assert profiles["local"]["program_roots"] == ["~", str(root)]
    assert profiles["podman"]["program_roots"] == profiles["cscs"]["program_roots"] == [str(root)]


def test_program_roots_from_the_environment_are_colon_separated_absolute_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("SCALELAB_PROGRAM_ROOTS", f"{tmp_path}/a:{tmp_path}/b")
    assert Settings(runs_dir=tmp_path / "runs").program_roots == [tmp_path / "a", tmp_path / "b"]
    for bad in ("relative/dir", "/with space"):
        monkeypatch.setenv("SCALELAB_PROGRAM_ROOTS", f"{tmp_path}:{bad}")
        with pytest.raises(ValueError, match="SCALELAB_PROGRAM_ROOTS"):
            Settings(runs_dir=tmp_path / "runs")


def program_on(settings: Settings):
    """A client on the real Slurm's interface that never submits (previews only), with the example profiles."""
    return make_client(settings.model_copy(update={"scheduler": "slurm"}), SlurmScheduler(run=_no_sbatch))


def _no_sbatch(argv):
    raise AssertionError(f"a preview ran {argv}")


def test_an_image_is_refused_where_the_runtime_starts_none(program_settings, root):
    request = with_program(root, image="registry.example/me/train:1")
    with program_on(program_settings) as client:
        for profile, runtime in (("local", "none"), ("cscs", "cscs")):
            request["resources"] = {"profile": profile, "time_limit": "00:10:00"}
            problems = refusal(client.post("/api/experiments/preview", json=request))
            assert problems == [
                (
                    ("body", "base", "program", "image"),
                    f"profile {profile} runs programs with runtime {runtime}, which starts no image: leave image out, "
                    "or choose a profile with podman, pyxis or apptainer",
                )
            ]


def test_the_programs_image_replaces_the_profiles(program_settings, root):
    """Needs the renderer to take program runs: the script names the program's image, not the profile's."""
    request = with_program(root, image="registry.example/me/train:1")
    request["resources"] = {"profile": "podman", "time_limit": "00:10:00"}
    with program_on(program_settings) as client:
        response = client.post("/api/experiments/preview", json=request)
    assert response.status_code == 200, response.text
    script = response.json()["script"]
    assert "registry.example/me/train:1" in script
    assert "scalelab-worker" not in script


# ---- following a program run to its end ---------------------------------------------------------------------------


def program_spec(gpus: int = 1, **params: Any) -> RunSpec:
    return RunSpec.model_validate(
        {
            "kind": "program",
            "strategy": "ddp",
            "gpus": gpus,
            "program": {"command": ["python", "train.py"], "workdir": "/home/u/proj", "params": params},
        }
    )


def followed(client, session: Session, engine, tmp_path: Path, scheduler, body: str, spec: RunSpec) -> dict:
    """A run of `spec` whose job runs `body` (not a rendered script: what the program prints is what matters here),
    followed by the monitor until all its output is read; the run as the API shows it."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    script = run_dir / "job.sbatch"
    script.write_text(f"#!/bin/bash\n{body}\n")
    job_id = scheduler.submit(script, run_dir)
    run = run_row(session, experiment_row(session), run_dir, run_spec=spec, job_id=job_id, scheduler=scheduler.name)
    monitor = Monitor(engine, scheduler, 0.1)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        monitor.cycle()
        shown: dict[str, Any] = client.get(f"/api/runs/{run.id}").json()
        if shown["ingest_done"]:
            return shown
        time.sleep(0.05)
    raise AssertionError("the run was not finished and read in time")


def test_a_failed_program_says_its_exit_code_and_the_last_lines_of_its_output(
    client, session, engine, tmp_path, local_scheduler
):
    epoch_line = format_record(EpochRecord(epoch=1, train_loss=1.0, epoch_time_s=0.1))
    lines = " ".join(f"'line {n}'" for n in range(1, 31))
    body = f"printf '%s\\n' {lines}; echo '{epoch_line}'; echo 'Traceback: RuntimeError: no data' >&2; exit 3"
    run = followed(client, session, engine, tmp_path, local_scheduler, body, program_spec())
    assert run["state"] == "failed"
    head, _, tail = run["message"].partition("\n")
    assert head == "the program exited with code 3; the last lines of its output:"
    # The last lines, the metric line left out: they are figures, not what went wrong.
    assert tail.splitlines() == [f"line {n}" for n in range(31 - TAIL_LINES + 1, 31)] + [
        "Traceback: RuntimeError: no data"
    ]


# What torchrun prints when one of its processes fails: its own traceback and report, long enough to push the
# child's own words out of the tail, and a "root cause" that is the sibling it stopped itself.
TORCHRUN_REPORT = [
    "Traceback (most recent call last):",
    *[f'  File "torch/distributed/run.py", line {n}, in main' for n in range(10)],
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "train_ddp.py FAILED",
    "Root Cause (first observed failure):",
    "  exitcode  : -15 (pid: 18620)  (SIGTERM)",
    "srun: error: vm: task 0: Exited with exit code 1",
]


def shell_lines(lines: list[str]) -> str:
    return "printf '%s\\n' " + " ".join("'" + line.replace("'", "'\\''") + "'" for line in lines)


def test_a_failed_program_names_the_first_error_that_the_launchers_report_pushed_out_of_the_tail(
    client, session, engine, tmp_path, local_scheduler
):
    child = ["[rank1]: Traceback (most recent call last):", 'File "train.py", line 3', "ValueError: bad shape (3, 4)"]
    body = shell_lines([*child, *TORCHRUN_REPORT]) + "; exit 1"
    run = followed(client, session, engine, tmp_path, local_scheduler, body, program_spec())
    head, _, tail = run["message"].partition("\n")
    assert head == (
        "the program exited with code 1; it first went wrong at: ValueError: bad shape (3, 4); "
        "the last lines of its output:"
    )
    assert tail.splitlines() == TORCHRUN_REPORT[-TAIL_LINES:]


def test_an_abort_as_python_shuts_down_is_named_with_what_avoids_it(client, session, engine, tmp_path, local_scheduler):
    epoch_line = format_record(EpochRecord(epoch=1, train_loss=1.0, epoch_time_s=0.1))
    body = shell_lines([epoch_line, "terminate called without an active exception", *TORCHRUN_REPORT]) + "; exit 1"
    run = followed(client, session, engine, tmp_path, local_scheduler, body, program_spec())
    head = run["message"].partition("\n")[0]
    assert head == f"the program exited with code 1; {EXIT_ABORT_HINT}; the last lines of its output:"
    assert "os._exit(0)" in head


def test_a_container_runtimes_refusal_is_named_with_what_to_do(client, session, engine, tmp_path, local_scheduler):
    fatal = (
        "FATAL:   While checking container encryption: could not open image /images/no-such.sif: open "
        "/images/no-such.sif: no such file or directory"
    )
    body = shell_lines(["INFO:    Converting SIF file to temporary sandbox...", fatal]) + "; exit 255"
    run = followed(client, session, engine, tmp_path, local_scheduler, body, program_spec())
    head = run["message"].partition("\n")[0]
    assert head.startswith(f"the program exited with code 255; the container runtime did not start it: {fatal}; ")
    assert "the image does not exist at that path on the compute nodes" in head


def test_a_cause_already_in_the_tail_is_not_said_twice(client, session, engine, tmp_path, local_scheduler):
    body = shell_lines(["loading", "RuntimeError: no data in /datasets"]) + "; exit 1"
    run = followed(client, session, engine, tmp_path, local_scheduler, body, program_spec())
    assert run["message"] == (
        "the program exited with code 1; the last lines of its output:\nloading\nRuntimeError: no data in /datasets"
    )


def test_a_failed_programs_tail_is_bounded(client, session, engine, tmp_path, local_scheduler):
    body = "for n in $(seq 1 50); do printf 'x%.0s' $(seq 1 300); echo; done; exit 1"
    run = followed(client, session, engine, tmp_path, local_scheduler, body, program_spec())
    tail = run["message"].partition("\n")[2]
    assert 0 < len(tail) <= TAIL_BYTES and set(tail) <= {"x", "\n"}


def test_a_program_that_printed_nothing_and_failed_says_so(client, session, engine, tmp_path, local_scheduler):
    run = followed(client, session, engine, tmp_path, local_scheduler, "exit 2", program_spec())
    assert run["message"] == "the program exited with code 2; it printed nothing"


def test_a_failed_worker_run_keeps_its_own_message(client, session, engine, tmp_path, local_scheduler):
    worker = RunSpec.model_validate({"gpus": 1})
    run = followed(client, session, engine, tmp_path, local_scheduler, "echo 'oops'; exit 3", worker)
    assert run["state"] == "failed" and "oops" not in (run["message"] or "")


def test_a_program_that_completed_without_an_epoch_line_is_told_what_to_print_and_flagged(
    client, session, engine, tmp_path, local_scheduler
):
    run = followed(client, session, engine, tmp_path, local_scheduler, "echo 'trained, I think'", program_spec())
    assert run["state"] == "completed"
    assert "[METRIC]" in run["message"] and "contract/metrics.py" in run["message"]
    (row,) = client.get("/api/compare", params={"run_id": run["id"]}).json()["data"]
    flags = {flag["code"]: flag for flag in row["flags"]}
    assert flags["no_metrics"]["severity"] == "warning"
    assert flags["no_metrics"]["message"] == run["message"]


def test_a_program_that_printed_its_epochs_completes_without_a_word(client, session, engine, tmp_path, local_scheduler):
    line = format_record(EpochRecord(epoch=1, train_loss=1.0, epoch_time_s=0.1))
    run = followed(client, session, engine, tmp_path, local_scheduler, f"echo '{line}'", program_spec())
    assert (run["state"], run["message"]) == ("completed", None)
    (row,) = client.get("/api/compare", params={"run_id": run["id"]}).json()["data"]
    # Nor incomplete: one epoch is short of the spec's default two, which a program does not read.
    assert not {"no_metrics", "incomplete"} & {flag["code"] for flag in row["flags"]}


# ---- comparing program runs -------------------------------------------------------------------------------------


def program_run(session: Session, experiment, run_dir: Path, records: list[WorkerRecord], spec: RunSpec) -> Run:
    """A completed program run whose output holds these records, ingested as the monitor would."""
    run_dir.mkdir(parents=True)
    (run_dir / OUTPUT_FILE).write_text("".join(format_record(record) + "\n" for record in records))
    run = run_row(session, experiment, run_dir, run_spec=spec, state=RunState.completed)
    ingest(session, run)
    run.ingest_done = True
    session.add(run)
    session.commit()
    return run


def timed(gpus: int, first_loss: float, **custom: float) -> list[WorkerRecord]:
    """Three epochs, the timed ones taking 8/gpus seconds, with custom figures growing by epoch."""
    return [start(), *[
        epoch(number, 8.0 / gpus if number > 1 else 20.0, loss=first_loss / number,
              **{name: value * number for name, value in custom.items()})
        for number in (1, 2, 3)
    ]]  # fmt: skip


def test_program_runs_compare_with_their_own_metrics_in_series_by_parameter(client, session, tmp_path):
    experiment = experiment_row(session)
    runs = {
        (gpus, lr): program_run(
            session, experiment, tmp_path / f"{gpus}-{lr}", timed(gpus, 2.0 + gpus, grad_norm=lr, tokens_seen=100),
            program_spec(gpus, lr=lr, hidden=32),
        )
        for gpus in (1, 2, 4)
        for lr in (0.1, 0.05)
    }  # fmt: skip
    worker = printed_run(session, experiment, tmp_path / "worker", [start(), epoch(1, 3.0)])

    body = client.get(f"/api/experiments/{experiment.id}/compare").json()
    rows = {row["run_id"]: row for row in body["data"]}
    assert body["metric_names"] == ["grad_norm", "tokens_seen"]
    one = rows[runs[(2, 0.1)].id]
    # The last epoch's figures; a program's batch is its own, so the row gives none.
    assert one["metrics"] == {"grad_norm": pytest.approx(0.3), "tokens_seen": 300.0}
    assert one["global_batch_size"] is None
    assert rows[worker.id]["metrics"] == {}
    # One series per learning rate, named by it; each scales against its own single process. Beside the worker's
    # run, the kind tells them apart (the worker's settings and the program's are not compared).
    assert one["series"] == "ddp, kind=program, params.lr=0.1"
    assert rows[runs[(2, 0.05)].id]["series"] == "ddp, kind=program, params.lr=0.05"
    assert rows[worker.id]["series"] == "ddp, kind=train"
    alone = client.get("/api/compare", params={"run_id": [run.id for run in runs.values()]}).json()["data"]
    assert {row["series"] for row in alone} == {"ddp, params.lr=0.1", "ddp, params.lr=0.05"}
    assert (one["speedup"], one["efficiency"], one["baseline_gpus"]) == (2.0, 1.0, 1)
    # The first losses differ with the GPUs, which the worker's runs would be flagged for; a program's layouts need
    # not train alike.
    assert not any(flag["code"] == "loss_mismatch" for run in runs.values() for flag in rows[run.id]["flags"])

    scaling = client.get(f"/api/experiments/{experiment.id}/scaling").json()
    points = {series["series"]: [point["gpus"] for point in series["points"]] for series in scaling["series"]}
    assert points["ddp, kind=program, params.lr=0.1"] == points["ddp, kind=program, params.lr=0.05"] == [1, 2, 4]

    history = client.get("/api/compare", params={"run_id": one["run_id"], "history": "true"}).json()["histories"]
    assert [point["metrics"]["grad_norm"] for point in history[one["run_id"]]] == pytest.approx([0.1, 0.2, 0.3])


def test_the_csv_has_a_column_per_custom_metric_after_the_others(client, session, tmp_path):
    experiment = experiment_row(session)
    program = program_run(
        session, experiment, tmp_path / "p", timed(1, 2.0, grad_norm=0.5, comm_fraction=0.25), program_spec(lr=0.1)
    )
    worker = printed_run(session, experiment, tmp_path / "w", [start(), epoch(1, 3.0)])
    text = client.get(f"/api/experiments/{experiment.id}/compare.csv").text
    header = text.splitlines()[0].split(",")
    assert header[-2:] == ["metric.comm_fraction", "metric.grad_norm"]
    assert header[:-2] == client.get("/api/compare.csv", params={"run_id": worker.id}).text.splitlines()[0].split(",")
    rows = {row["run_id"]: row for row in csv.DictReader(io.StringIO(text))}
    assert (rows[program.id]["metric.grad_norm"], rows[program.id]["metric.comm_fraction"]) == ("1.5", "0.75")
    assert rows[worker.id]["metric.grad_norm"] == ""


def test_only_an_epochs_own_finite_numbers_are_custom_metrics(client, session, tmp_path):
    """Booleans, text, nested figures and the fields the worker declares are not a program's metrics."""
    experiment = experiment_row(session)
    run_dir = tmp_path / "odd"
    run_dir.mkdir()
    (run_dir / OUTPUT_FILE).write_text(
        '[METRIC] {"v": 1, "kind": "epoch", "epoch": 1, "train_loss": 1.0, "epoch_time_s": 2.0, "mfu": 0.4, '
        '"converged": true, "note": "ok", "parts": {"a": 1}, "metrics": {"x": "y"}, "big": 1e308, "count": 7}\n'
        "[METRIC] epoch=2 loss=0.5 time=1.0 acc=0.9 tag=fast\n"
    )
    run = run_row(session, experiment, run_dir, run_spec=program_spec(), state=RunState.completed)
    ingest(session, run)
    session.commit()
    history = client.get("/api/compare", params={"run_id": run.id, "history": "true"}).json()["histories"][run.id]
    assert [point["metrics"] for point in history] == [{"big": 1e308, "count": 7.0}, {"acc": 0.9}]
