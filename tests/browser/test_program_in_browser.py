"""A user's own program through the pages, in a real browser on the real local Slurm: the form's program inputs
(only what applies to a program shown, the command's words, problems at their fields), its preview's batch
script, submitting a sweep over GPUs and a parameter, the program's own metric charted on the dashboard and its
run page, and a new experiment started from it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect
from sqlmodel import Session

from benches.server_process import running_server
from server.db import make_engine
from server.services import users
from tests.browser.conftest import accessibility_violations, charts_final, screenshot
from tests.browser.test_trust_in_browser import by_name, chart
from tests.conftest import serving

pytestmark = [pytest.mark.browser, pytest.mark.slurm]

# A program as a course would write it, standard library only: rank 0 prints an epoch record with a metric of its
# own, grad_norm, which depends on the swept --lr so that the runs tell apart on the chart.
TRAIN_PY = """\
import argparse, json, os, time
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
args = parser.parse_args()
for epoch in (1, 2):
    time.sleep(0.2)
    if os.environ.get("RANK", "0") == "0":
        record = {"v": 1, "kind": "epoch", "epoch": epoch, "train_loss": 1.0 / epoch, "epoch_time_s": 0.2,
                  "grad_norm": args.lr * 10 / epoch}
        print("[METRIC] " + json.dumps(record), flush=True)
"""


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of programs, the one root besides the home directory that the server lets programs run from."""
    root = tmp_path_factory.mktemp("programs")
    (root / "train.py").write_text(TRAIN_PY)
    return root


@pytest.fixture(scope="module")
def server(slurm: None, tmp_path_factory: pytest.TempPathFactory, programs: Path) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("browser"), {"SCALELAB_PROGRAM_ROOTS": str(programs)}) as url:
        yield url


SPLITS: list[tuple[str, dict[str, list[str]]]] = [
    ("python train.py --epochs 3", {"words": ["python", "train.py", "--epochs", "3"]}),
    ("  python   'my train.py' \"a \\\"b\\\"\" c\\ d ''", {"words": ["python", "my train.py", 'a "b"', "c d", ""]}),
    ("python -c 'print($HOME > 1)'", {"words": ["python", "-c", "print($HOME > 1)"]}),
    ("", {"words": []}),
]
REFUSED = [
    ("python train.py > log", "“>” is not acted on: no shell runs the command"),
    ("python $HOME/train.py", "“$” is not acted on"),
    ("python 'train.py", "a single quote is not closed"),
    ('python "train.py', "a double quote is not closed"),
    ("python train.py \\", "ends with a lone \\"),
]


def test_the_command_is_split_into_words_as_a_shell_would_and_joined_back(page: Page, server: str):
    page.goto(f"{server}/experiments/new")
    module = "import('/static/js/form/program.js')"
    for text, expected in SPLITS:
        assert page.evaluate(f"async text => (await {module}).splitWords(text)", text) == expected, text
        if expected["words"]:
            joined = page.evaluate(f"async words => (await {module}).joinWords(words)", expected["words"])
            assert page.evaluate(f"async text => (await {module}).splitWords(text)", joined) == expected, joined
    for text, message in REFUSED:
        assert message in page.evaluate(f"async text => (await {module}).splitWords(text)", text)["error"], text
    # Parameters: one value fixes it, several sweep it; numbers and booleans typed, "quoted" text kept as text.
    params = page.evaluate(
        f"async text => (await {module}).parseParams(text, '^[a-z][a-z0-9_]{{0,39}}$')",
        'lr = 0.05, 0.1\n# a comment\n\nopt = adam\nsteps = 3\namp = true\ntag = "3", "a,b"',
    )
    assert params == {
        "fixed": {"opt": "adam", "steps": 3, "amp": True},
        "swept": {"lr": [0.05, 0.1], "tag": ["3", "a,b"]},
    }


def test_the_form_shows_what_a_program_reads_and_problems_at_their_fields(page: Page, server: str, programs: Path):
    page.goto(f"{server}/experiments/new")
    expect(page.locator("#program-inputs")).to_be_hidden()
    page.select_option("#f-kind", "program")
    expect(page.locator("#program-inputs")).to_be_visible()
    # The worker's settings are hidden (whole groups with them); what a program reads stays.
    for hidden in ("f-model", "f-epochs", "f-lr", "f-global_batch_size", "x-scaling"):
        expect(page.locator(f"#{hidden}")).to_be_hidden()
    expect(page.get_by_role("group", name="Checkpoints and logging")).to_be_hidden()
    expect(page.get_by_role("group", name="Experiment")).to_be_visible()
    for shown in ("f-strategy", "g-gpus", "f-seed", "f-nodes", "r-time_limit", "x-isolation"):
        expect(page.locator(f"#{shown}")).to_be_visible()

    # Found in the page: a shell's redirection in the command, a parameter name the API would refuse, no workdir.
    page.fill("#p-command", "python train.py > log")
    page.fill("#p-params", "LR = 0.1")
    expect(page.locator("#e-p-command")).to_contain_text("“>” is not acted on")
    expect(page.locator("#e-p-params")).to_contain_text("line 1: “LR” is not a parameter name")
    expect(page.locator("#e-p-workdir")).to_have_text("enter the directory it starts in, an absolute path")
    expect(page.locator("#preview-status")).to_have_text("Fix the fields marked above to see what would run.")

    # Found by the server: a working directory outside the profile's roots, and a variable the launch sets.
    page.fill("#p-command", "python 'train.py'")
    expect(page.locator("#p-argv li")).to_have_text(["python", "train.py"])
    page.fill("#p-params", "lr = 0.1")
    page.fill("#p-workdir", "/etc")
    page.fill("#p-env", "WORLD_SIZE=8")
    expect(page.locator("#e-p-env")).to_contain_text("WORLD_SIZE")
    page.fill("#p-env", "")
    expect(page.locator("#e-p-workdir")).to_contain_text(str(programs))
    expect(page.locator("#p-workdir")).to_have_attribute("aria-invalid", "true")
    screenshot(page, "program-form-errors")
    # A script that is not in the working directory: said at the command, before anything is queued.
    page.fill("#p-workdir", str(programs))
    page.fill("#p-command", "python trian.py")
    expect(page.locator("#e-p-command")).to_contain_text(f"the program file trian.py does not exist in {programs}")
    expect(page.locator("#p-workdir")).not_to_have_attribute("aria-invalid", "true")

    # Back to training: the worker's settings return, the program's are gone.
    page.select_option("#f-kind", "train")
    expect(page.locator("#f-model")).to_be_visible()
    expect(page.locator("#program-inputs")).to_be_hidden()
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 3 runs.")


def wait_for_states(server: str, experiment: str, timeout_s: float = 240) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs: list[dict] = httpx.get(f"{server}/api/runs?experiment_id={experiment}", timeout=10).json()["data"]
        live = ("created", "submitted", "pending", "running")
        if all(run["state"] not in live and run["ingest_done"] for run in runs):
            return runs
        time.sleep(1)
    raise AssertionError(f"the runs did not end in {timeout_s} s: {[run['state'] for run in runs]}")


def test_a_program_sweep_from_the_form_to_its_own_metric_on_the_dashboard(page: Page, server: str, programs: Path):
    page.goto(f"{server}/experiments/new")
    page.fill("#x-name", "my program")
    page.select_option("#x-isolation", "shared")  # the runs share the machine: all at once
    page.select_option("#f-kind", "program")
    page.fill("#p-command", "python train.py")
    page.fill("#p-workdir", str(programs))
    page.fill("#p-env", "OMP_NUM_THREADS=1")
    page.fill("#p-params", "lr = 0.05, 0.1")
    page.fill("#g-gpus", "1, 2")
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 4 runs.")
    combinations = [f"gpus={gpus}, params.lr={lr}" for gpus in (1, 2) for lr in (0.05, 0.1)]
    expect(page.locator("#preview-run option")).to_have_text([f"{n + 1}: {c}" for n, c in enumerate(combinations)])
    page.select_option("#preview-run", label="4: gpus=2, params.lr=0.1")
    script = page.locator("#preview-script")
    expect(script).to_contain_text("--ntasks-per-node=2")
    expect(script).to_contain_text("train.py")
    expect(script).to_contain_text("0.1")
    # Parameters by the environment alone: the script has no --lr after the command, only the variable.
    page.select_option("#p-params_style", "env")
    expect(script).not_to_contain_text("--lr")
    expect(script).to_contain_text("SCALELAB_PARAM_LR=0.1")
    page.select_option("#p-params_style", "flags")
    expect(script).to_contain_text("--lr")
    # The launcher chosen reaches the script: torchrun starts the processes of a node itself.
    page.select_option("#p-launcher", "torchrun")
    expect(script).to_contain_text("--nproc-per-node=2")
    # Each run in its own directory: the script still runs the workdir's train.py.
    page.select_option("#p-cwd", "run_dir")
    expect(script).to_contain_text(f"{programs}/train.py")
    screenshot(page, "program-form-preview")

    page.click("#submit-button")
    page.wait_for_url("**/runs?experiment=*")
    experiment = page.url.rsplit("=", 1)[1]
    runs = wait_for_states(server, experiment)
    assert {run["state"] for run in runs} == {"completed"}, [(run["state"], run["message"]) for run in runs]

    # The dashboard: the program's metric in the menu, first; against GPUs, a series per lr; over epochs, a run each.
    page.goto(f"{server}/experiments/{experiment}")
    charts_final(page)
    expect(page.locator("#custom-metrics")).to_be_visible()
    expect(page.locator("#metric-choice")).to_have_value("grad_norm")
    per_gpus = by_name(chart(page, "metric-gpus"))
    assert len(per_gpus) == 2 and all(trace["x"] == [1, 2] for trace in per_gpus.values()), per_gpus
    # Each run's grad_norm at its last epoch: lr * 10 / 2.
    assert sorted(trace["y"][0] for trace in per_gpus.values()) == pytest.approx([0.25, 0.5])
    per_epoch = chart(page, "metric-epochs")
    assert len(per_epoch) == 4 and all(trace["x"] == [1, 2] for trace in per_epoch)
    expect(page.locator("#mode-metric-gpus")).to_have_text(": grad_norm")
    page.select_option("#metric-choice", "train_loss")
    expect(page.locator("#mode-metric-gpus")).to_have_text(": train loss")
    assert all(trace["y"] == [1.0, 0.5] for trace in chart(page, "metric-epochs"))
    screenshot(page, "program-dashboard")
    assert accessibility_violations(page) == [], "a program's experiment, with its own metrics"

    # A run's page: its program, and its metric over the epochs.
    run = runs[-1]
    page.goto(f"{server}/runs/{run['id']}")
    expect(page.locator("#run-command")).to_have_text("python train.py")
    expect(page.locator("#run-params")).to_have_text(f"--lr {run['spec']['program']['params']['lr']}")
    expect(page.locator("#run-env")).to_have_text("OMP_NUM_THREADS")
    # Which code it started, noted by its batch script, and that the script is the same now.
    expect(page.locator("#run-code")).to_contain_text("train.py sha256")
    expect(page.locator("#run-code-now")).to_have_attribute("data-now", "same")
    expect(page.locator("#run-metric-figure")).to_be_visible()
    page.wait_for_function("document.getElementById('chart-run-metric').data?.[0]?.x.length === 2")
    expect(page.locator("#run-warning")).to_be_hidden()
    screenshot(page, "program-run")
    assert accessibility_violations(page) == [], "a program's run"

    # A new experiment from this one: the form holds its program and sweep again.
    page.goto(f"{server}/experiments/new?from={experiment}")
    expect(page.locator("#program-inputs")).to_be_visible()
    expect(page.locator("#p-command")).to_have_value("python train.py")
    expect(page.locator("#p-launcher")).to_have_value("torchrun")
    expect(page.locator("#p-cwd")).to_have_value("run_dir")
    expect(page.locator("#p-params")).to_have_value("lr = 0.05, 0.1")
    expect(page.locator("#p-env")).to_have_value("OMP_NUM_THREADS=1")
    expect(page.locator("#preview-status")).to_have_text("This experiment creates 4 runs.")


def test_a_plain_user_is_told_why_the_form_offers_no_program(page: Page, tmp_path_factory: pytest.TempPathFactory):
    """Where every job runs as the service's account (here: Slurm's own sbatch), only an admin runs programs: a plain
    user's form cannot choose kind program, and says why beside the choice."""
    work = tmp_path_factory.mktemp("plain")
    with running_server(work, "slurm", {"SCALELAB_AUTH": "true"}) as url:  # nothing to cancel: nothing is submitted
        engine = make_engine(f"sqlite:///{work / 'scalelab.db'}")
        with Session(engine) as session:
            token = users.add_user(session, "bob")
        engine.dispose()
        page.goto(f"{url}/login?next=/experiments/new")
        page.fill("#login-token", token)
        page.locator("#login-token").press("Enter")
        page.wait_for_url(f"{url}/experiments/new")
        refused = page.locator("#programs-refused")
        expect(refused).to_be_visible()
        expect(refused).to_contain_text("bob may not run a program")
        expect(refused).to_contain_text("only admins may run programs")
        expect(page.locator("#f-kind option[value=program]")).to_be_disabled()
        assert "programs-refused" in (page.locator("#f-kind").get_attribute("aria-describedby") or "")
        assert accessibility_violations(page) == []
