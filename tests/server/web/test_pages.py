"""The pages as the server renders them: every spec field in the form, filters, a run's files, plotly served."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sqlmodel import Session

from contract.fabric import Tier
from contract.metrics import CUSTOM_NAME
from contract.program import ENV_NAME, PARAM_NAME, ProgramSpec
from contract.spec import PROBE_SECONDS_DEFAULT, PROGRAM_FIELDS, SERVER_FIELDS, RunSpec
from contract.states import FailureKind, RunState
from contract.target import WORKER_METRICS
from server.models import Metric, RunEvent, RunEventKind, RunSummary
from server.web.forms import TARGET_GROUP, program_inputs, resource_fields, spec_fields
from server.web.templating import progress_text
from tests.factories import experiment_row, run_row, spec
from tests.server.services.ingestion.test_fabric_store import INTER, INTRA, measured, probe_run


def page_data(html: str, element_id: str = "page-data") -> dict:
    match = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', html, re.S)
    assert match, f"no #{element_id} in the page"
    data: dict = json.loads(match.group(1))
    return data


def test_the_form_has_every_spec_field_with_its_bounds(client):
    html = client.get("/experiments/new").text
    # What the server sets from the experiment as a whole is no spec field of the form (an inference run's checkpoint
    # is chosen in the form's own "Generate from" inputs, the target in its own inputs); a program is entered in the
    # form's Program group.
    in_form = set(RunSpec.model_fields) - SERVER_FIELDS - {"program"}
    for name in in_form:
        assert f'data-field="{name}"' in html, name
        # One experiment is of one kind, and runs one program (whose parameters are swept one by one).
        assert (f'id="s-{name}"' in html) == (name not in ("kind", "program")), f"{name} cannot be swept"
    fields = {f.name: f for _, members in spec_fields() for f in members}
    assert set(fields) == in_form
    assert (fields["model"].kind, fields["model"].choices[:2]) == ("choice", ("mlp", "cnn"))
    assert (fields["lr"].kind, fields["lr"].exclusive_minimum, fields["lr"].maximum) == ("float", 0, 10)
    assert (fields["gpus"].minimum, fields["gpus"].fixed_in) == (1, "base")
    assert fields["tp_degree"].optional and fields["tp_degree"].default is None
    # nodes is fixed in the resources and swept in the grid.
    assert (fields["nodes"].fixed_in, fields["nodes"].sweepable) == ("resources", True)
    assert {f.name for f in resource_fields()} == {"time_limit", "max_concurrent"}
    assert 'id="r-time_limit"' in html and 'value="00:10:00"' in html


def test_the_form_has_the_target_beside_the_time_to_accuracy_settings(client):
    html = client.get("/experiments/new").text
    # The group's fieldset up to the next group's (a swept field's values are a fieldset of their own within it).
    group = re.search(r'id="target-inputs">\s*<legend>(.*?)</legend>(.*?)<fieldset class="group"', html, re.S)
    assert group and group[1] == TARGET_GROUP, "no Time to accuracy group"
    # The target's own inputs and the spec fields of time to accuracy, together; the worker's metrics to choose from,
    # a program's typed and checked against the API's pattern for a metric's name.
    for name in ("t-metric", "t-metric_name", "t-direction", "t-bound", "e-t-metric", "e-t-bound"):
        assert f'id="{name}"' in group[2], name
    for name in ("stop_at_target", "lr_scaling", "warmup_epochs"):
        assert f'data-field="{name}"' in group[2], name
    for metric in WORKER_METRICS:
        assert f'<option value="{metric}">{metric}</option>' in group[2], metric
    assert f'data-pattern="{CUSTOM_NAME.pattern}"' in group[2]
    # The learning-rate rule and the warm-up are swept like the other grid fields; a program reads neither.
    fields = {f.name: f for _, members in spec_fields() for f in members}
    assert fields["lr_scaling"].sweepable and fields["lr_scaling"].choices == ("none", "linear", "sqrt")
    assert fields["warmup_epochs"].sweepable and not fields["stop_at_target"].for_program


def test_the_form_has_the_program_inputs_and_marks_what_a_program_does_not_read(client):
    html = client.get("/experiments/new").text
    for name in ProgramSpec.model_fields:
        assert f'id="p-{name}"' in html and f'id="e-p-{name}"' in html, name
    assert sorted(p.name for p in program_inputs()) == sorted(ProgramSpec.model_fields)  # every part, once
    assert '<option value="torchrun">torchrun</option>' in html
    # The patterns the page checks names with are the API's.
    assert f'data-pattern="{PARAM_NAME}"' in html and f'data-pattern="{ENV_NAME}"' in html
    fields = {f.name: f for _, members in spec_fields() for f in members}
    assert {name for name, f in fields.items() if f.for_program} == PROGRAM_FIELDS - {"program", "target"}
    for name, f in fields.items():
        assert re.search(rf'data-field="{name}"[^>]*\n\s*data-kinds="{" ".join(f.kinds)}"', html), name
    assert all(f.for_program for f in resource_fields())


def test_the_form_starts_from_an_experiment_to_clone(client, session):
    request = {"name": "old", "base": {"epochs": 3}, "grid": {"strategy": ["ddp", "fsdp"]}}
    experiment = experiment_row(session, name="old")
    experiment.request = request
    session.commit()
    start = page_data(client.get(f"/experiments/new?from={experiment.id}").text, "start-request")
    assert start == {**request, "name": "old (again)"}
    assert page_data(client.get("/experiments/new?from=nope").text, "start-request")["grid"] == {"gpus": [1, 2, 4]}


def _shown_runs(html: str) -> set[str]:
    return set(re.findall(r'<tr data-run="([0-9a-f]+)"', html))


def test_runs_are_filtered_by_experiment_state_model_and_strategy(client, session: Session, tmp_path: Path):
    first = experiment_row(session, name="first")
    second = experiment_row(session, name="second")
    mlp = run_row(session, first, tmp_path / "a", state=RunState.running)
    cnn = run_row(session, first, tmp_path / "b", run_spec=spec(model="cnn", strategy="fsdp"), position=1)
    other = run_row(session, second, tmp_path / "c", state=RunState.completed, run_spec=spec(strategy="single"))

    assert _shown_runs(client.get("/runs").text) == {mlp.id, cnn.id, other.id}
    assert _shown_runs(client.get(f"/runs?experiment={first.id}").text) == {mlp.id, cnn.id}
    assert _shown_runs(client.get("/runs?state=running&state=completed").text) == {mlp.id, other.id}
    assert _shown_runs(client.get("/runs?model=cnn").text) == {cnn.id}
    assert _shown_runs(client.get("/runs?strategy=single").text) == {other.id}
    assert _shown_runs(client.get(f"/runs?experiment={second.id}&model=cnn").text) == set()
    # The empty choices of the filter form mean "any".
    assert _shown_runs(client.get("/runs?experiment=&state=&model=&strategy=").text) == {mlp.id, cnn.id, other.id}
    assert client.get("/runs?model=bert").status_code == 422


def test_the_experiment_filter_offers_each_experiment_escaped_with_the_chosen_one_selected(
    client, session: Session, tmp_path: Path
):
    plain = experiment_row(session, name="plain")
    hostile = experiment_row(session, name="<script>alert(\"x\")</script> & 'co'")

    html = client.get(f"/runs?experiment={plain.id}").text
    assert f'<option value="{plain.id}" selected>plain ({plain.id})</option>' in html
    assert (
        f'<option value="{hostile.id}">&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#x27;co&#x27; '
        f"({hostile.id})</option>" in html
    )
    assert "<script>alert" not in html
    # Another choice is another page: the options kept for the first are not shown for it.
    assert f'<option value="{hostile.id}" selected>' in client.get(f"/runs?experiment={hostile.id}").text


def test_the_runs_page_shows_progress_and_why_a_run_waits(client, session: Session, tmp_path: Path):
    experiment = experiment_row(session)
    running = run_row(session, experiment, tmp_path / "a", state=RunState.running, run_spec=spec(epochs=5))
    session.add(RunSummary(run_id=running.id, epochs_done=2, first_epoch_time_s=9.0, epoch_time_sum_s=13.0))
    run_row(session, experiment, tmp_path / "b", state=RunState.pending, scheduler_reason="Resources", position=1)
    session.commit()
    html = client.get("/runs").text
    assert "epoch 3 of 5, about 12 s left" in html
    assert "Slurm: Resources" in html


def test_a_waiting_run_says_why_it_waits_never_a_limit_the_request_did_not_set(client, session, tmp_path):
    experiment = experiment_row(session)
    turns = "waiting for its turn: the experiment's runs are exclusive and share this cluster's nodes"
    run_row(session, experiment, tmp_path / "a", state=RunState.created, waiting=True, message=turns)
    run_row(session, experiment, tmp_path / "b", state=RunState.created, waiting=True, position=1)
    html = client.get("/runs").text
    assert turns in html.replace("&#39;", "'")
    assert "waits for its turn among the experiment's runs" in html.replace("&#39;", "'")
    assert "max_concurrent" not in html


def test_resubmit_says_what_it_resumes_from_only_where_there_is_a_checkpoint(client, session, tmp_path: Path):
    experiment = experiment_row(session)
    program = run_row(session, experiment, tmp_path / "p", run_spec=program_spec(), state=RunState.failed)
    html = client.get(f"/runs/{program.id}").text
    assert 'data-action="resubmit">Resubmit (runs the program again in the same run directory)<' in html
    assert "resumes from its checkpoint" not in html
    bare = run_row(session, experiment, tmp_path / "w", state=RunState.failed, position=1)
    assert "Resubmit (starts over: it left no checkpoint)" in client.get(f"/runs/{bare.id}").text
    (tmp_path / "k" / "checkpoints" / "epoch-2").mkdir(parents=True)
    kept = run_row(session, experiment, tmp_path / "k", state=RunState.failed, position=2)
    assert "Resubmit (resumes from its checkpoint of epoch 2)" in client.get(f"/runs/{kept.id}").text


def test_progress_in_words():
    assert progress_text(RunState.running, 0, 4, None) == "epoch 1 of 4"
    assert progress_text(RunState.running, 1, 4, 30.0) == "epoch 2 of 4, about 2 min left"
    assert progress_text(RunState.completed, 4, 4, 30.0) == "4 of 4 epochs"
    assert progress_text(RunState.pending, 0, 4, None) == ""


def test_the_run_page_shows_its_script_checkpoints_history_and_host(client, session: Session, tmp_path: Path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "epoch-1").mkdir(parents=True)
    (run_dir / "checkpoints" / "epoch-2").mkdir()
    (run_dir / "checkpoints" / ".epoch-3.partial").mkdir()
    (run_dir / "job.sbatch").write_text("#!/bin/bash\n#SBATCH --job-name=scalelab-x\n")
    experiment = experiment_row(session)
    run = run_row(session, experiment, run_dir, state=RunState.running, job_id="4242", profile="local")
    start = {"v": 1, "kind": "start", "world_size": 1, "nodes": 1, "device": "cpu", "backend": "gloo"}
    start |= {"strategy": "ddp", "torch_version": "2.14.1", "hostname": "node-7"}
    session.add(Metric(run_id=run.id, offset=0, kind="start", record=start))
    resume = {"v": 1, "kind": "resume", "epoch": 2}
    session.add(Metric(run_id=run.id, offset=100, kind="resume", epoch=2, record=resume))
    session.add(RunEvent(run_id=run.id, kind=RunEventKind.requeued, job_id="4242", detail="preempted by a higher QoS"))
    session.commit()

    html = client.get(f"/runs/{run.id}").text
    assert "#SBATCH --job-name=scalelab-x" in html
    assert "after epoch 1, 2." in html
    assert "Resumed 1 time: from epoch 2." in html
    assert "node-7" in html and "4242" in html and "preempted by a higher QoS" in html
    assert "none: the nodes' own Python" in html
    assert page_data(html) == {
        "run_id": run.id, "experiment_id": experiment.id, "kind": "train", "epochs": 1, "state": "running",
    }  # fmt: skip
    # A training run's curves, none of a probe's or an inference run's parts.
    for part in ("chart-run-loss", "chart-run-accuracy", "chart-run-epoch-times", "run-metric-figure"):
        assert f'id="{part}"' in html, part
    for other in ("chart-intra_node", "fabric-table", "run-inference", "generations-table"):
        assert other not in html, other


def test_a_script_linked_out_of_the_run_directory_is_not_shown(client, session: Session, tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not show me")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "job.sbatch").symlink_to(secret)
    run = run_row(session, experiment_row(session), run_dir)
    html = client.get(f"/runs/{run.id}").text
    assert "do not show me" not in html
    assert "cannot be read" in html


def test_missing_runs_and_experiments_are_pages_that_say_so(client):
    for path in ("/runs/nope", "/experiments/nope"):
        response = client.get(path)
        assert response.status_code == 404
        assert "text/html" in response.headers["content-type"]
        assert "There is no" in response.text


def test_dashboards_of_an_experiment_and_of_a_selection(client, session: Session, tmp_path: Path):
    experiment = experiment_row(session, name="scaling")
    first = run_row(session, experiment, tmp_path / "a")
    second = run_row(session, experiment, tmp_path / "b", position=1)
    html = client.get(f"/experiments/{experiment.id}").text
    for chart in ("epoch-time", "speedup", "efficiency", "val-loss", "val-accuracy", "memory", "loss-curves"):
        assert f'id="chart-{chart}"' in html
    assert page_data(html)["experiments"] == [experiment.id]

    html = client.get(f"/compare?run={second.id}&run=nope&run={first.id}").text
    data = page_data(html)
    assert (data["mode"], data["runs"], data["experiments"]) == ("selection", [second.id, first.id], [experiment.id])
    assert "No such runs: nope." in html


def test_plotly_and_the_scripts_are_served_without_a_cdn(client):
    response = client.get("/vendor/plotly.min.js")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    assert b"plotly.js v" in response.content[:200]
    assert response.headers["content-encoding"] == "gzip"  # TestClient asks for gzip, as browsers do
    assert response.num_bytes_downloaded < len(response.content) / 3
    for module in ("api", "charts", "dashboard", "dom", "form", "format", "run", "runs"):
        assert client.get(f"/static/js/{module}.js").status_code == 200, module
    for page in ("/", "/experiments/new", "/runs"):
        assert "cdn" not in client.get(page).text.lower()


def test_pages_stay_out_of_the_api_schema(client):
    paths = client.get("/openapi.json").json()["paths"]
    operations = {"/healthz", "/readyz", "/metrics"}  # the probes and Prometheus's, documented with the API
    assert all(path.startswith("/api/") or path in operations for path in paths)


def test_hostile_page_parameters_are_refused_or_harmless(client, session: Session):
    experiment_row(session, name="<script>alert(1)</script>")
    assert "<script>alert(1)" not in client.get("/").text
    refused = [
        "/runs?skip=" + "9" * 30,
        "/runs?experiment=" + "a" * 40,
        "/runs?state=bogus",
        "/runs?model=%00",
        "/compare?run=" + "a" * 40,
        "/compare?" + "&".join(f"run={i}" for i in range(300)),
        "/experiments/new?from=" + "z" * 100,
    ]
    for url in refused:
        assert client.get(url).status_code == 422, url
    for url in ("/runs?state=", "/compare", "/compare?run=", "/experiments/new?from=%00", "/runs?experiment=%3Cb%3E"):
        assert client.get(url).status_code == 200, url
    assert client.get("/runs/" + "x" * 5000).status_code == 404


def test_a_probe_experiment_gets_the_probe_view_with_its_failures_and_rerun_not_the_training_charts(
    client, session, tmp_path
):
    experiment = experiment_row(session, name="the fabric", request={"name": "the fabric", "base": {"kind": "probe"}})
    failed = run_row(
        session, experiment, tmp_path / "a", run_spec=RunSpec(kind="probe", nodes=2, gpus=4), state=RunState.failed,
        failure_kind=FailureKind.launcher_error, failure_detail="srun: error: unable to launch",
    )  # fmt: skip
    html = client.get(f"/experiments/{experiment.id}").text
    for part in ('id="chart-intra_node"', 'id="chart-inter_node"', 'id="probe-runs"', 'id="fabric-table"'):
        assert part in html
    assert "js/probe.js" in html and "js/dashboard.js" not in html
    for training in ("chart-epoch-time", "chart-speedup", "chart-loss-curves", "compare-table"):
        assert training not in html
    # The experiment page's common parts: its failures by kind, rerunning them, its runs, sharing, its request.
    assert 'data-kind="launcher_error"' in html and f'href="/runs/{failed.id}"' in html
    assert 'id="rerun-form"' in html and "js/reruns.js" in html
    assert f'href="/runs?experiment={experiment.id}"' in html and 'id="sharing"' in html
    assert "The experiment&#39;s request" in html or "The experiment's request" in html
    # Training and program experiments keep the dashboard.
    for kind in ("train", "program"):
        other = experiment_row(session, name=kind, request={"name": kind, "base": {"kind": kind}})
        assert "js/dashboard.js" in client.get(f"/experiments/{other.id}").text


def test_an_inference_experiment_gets_the_inference_view_and_the_form_its_checkpoints(client, session, tmp_path):
    experiment = experiment_row(session, name="layouts", request={"name": "layouts", "base": {"kind": "inference"}})
    html = client.get(f"/experiments/{experiment.id}").text
    for chart in ("tokens", "latency", "ttft", "memory"):
        assert f'id="chart-{chart}"' in html
    assert 'id="generations-table"' in html and "js/inference.js" in html and 'id="chart-speedup"' not in html
    trained = {"model": "gpt", "dataset": "text", "width": 48}
    with_checkpoint = run_row(session, experiment, tmp_path / "a", run_spec=spec(**trained), state=RunState.completed)
    (tmp_path / "a" / "checkpoints" / "epoch-1").mkdir(parents=True)
    without = run_row(session, experiment, tmp_path / "b", run_spec=spec(**trained), state=RunState.completed)
    other = run_row(session, experiment, tmp_path / "c", run_spec=spec(model="gpt"), state=RunState.completed)
    (tmp_path / "c" / "checkpoints" / "epoch-1").mkdir(parents=True)
    form = client.get("/experiments/new").text
    assert f'<option value="{with_checkpoint.id}">{with_checkpoint.id}: gpt width 48' in form
    assert without.id not in form and other.id not in form


def test_a_probe_runs_page_says_what_it_probes_and_has_its_tiers_curves_and_fits_not_training_curves(
    client, session: Session, tmp_path: Path
):
    experiment = experiment_row(session, name="the fabric", request={"name": "the fabric", "base": {"kind": "probe"}})
    records = [
        *measured(Tier.intra_node, INTRA, nodes=2, per_node=2),
        *measured(Tier.inter_node, INTER, nodes=2, per_node=2),
    ]
    run = probe_run(session, experiment, tmp_path, records, nodes=2, per_node=2)
    html = client.get(f"/runs/{run.id}").text
    intro = re.sub(r"\s+", " ", re.search(r'<p id="run-intro">(.*?)</p>', html, re.S)[1])  # type: ignore[index]
    assert 'a fabric probe on 2 nodes \u00d7 2 processes per node, backend <span id="run-backend">gloo</span>' in intro
    assert f"for at most {PROBE_SECONDS_DEFAULT:g} s." in intro and "GPUs" not in intro
    for part in ("chart-intra_node", "chart-inter_node", "fabric-table", "probe-status", "run-fabric-link"):
        assert f'id="{part}"' in html, part
    assert f'href="/experiments/{experiment.id}"' in html and 'id="run-probe-view"' in html
    for training in ("chart-run-loss", "chart-run-accuracy", "chart-run-epoch-times", "run-metric-figure"):
        assert training not in html, training
    # What every run's page has: its state, trust, history, output, spec and script.
    for common in ("run-state", "trust", "run-resources", "events-table", "log", "spec-table"):
        assert f'id="{common}"' in html, common
    assert page_data(html)["kind"] == "probe" and "js/run.js" in html


def test_an_inference_runs_page_has_its_generation_figures_not_training_curves(
    client, session: Session, tmp_path: Path
):
    experiment = experiment_row(session, request={"name": "layouts", "base": {"kind": "inference"}})
    inference = spec(kind="inference", model="gpt", dataset="text", strategy="single", checkpoint="/runs/a")
    run = run_row(session, experiment, tmp_path, run_spec=inference, state=RunState.running)
    html = client.get(f"/runs/{run.id}").text
    assert "inference of gpt (32 new tokens per prompt), single with 1 GPUs." in html
    assert 'id="run-inference"' in html and 'id="generations-table"' in html and 'id="inference-status"' in html
    for training in ("chart-run-loss", "chart-run-accuracy", "chart-run-epoch-times", "chart-intra_node"):
        assert training not in html, training
    assert page_data(html) | {"run_id": ""} == {
        "run_id": "",
        "experiment_id": experiment.id,
        "kind": "inference",
        "epochs": 1,
        "state": "running",
    }


def program_spec(**program: object) -> RunSpec:
    base = {"command": ["python", "train.py", "--note", "two words"], "workdir": "/home/alice/proj"}
    return RunSpec.model_validate({"kind": "program", "gpus": 2, "program": {**base, **program}})


def test_a_program_runs_page_shows_its_program_and_not_the_secrets_in_its_env(client, session: Session, tmp_path: Path):
    experiment = experiment_row(session)
    run_spec = program_spec(launcher="torchrun", env={"API_KEY": "s3cret-value"}, params={"lr": 0.05, "amp": True})
    run = run_row(session, experiment, tmp_path, run_spec=run_spec, state=RunState.running)
    session.add(RunSummary(run_id=run.id, epochs_done=3))
    session.commit()
    html = client.get(f"/runs/{run.id}").text
    # The command as it could be typed again: the word with a space quoted, as the form's field splits it.
    assert "the program <code>python train.py --note &#39;two words&#39;</code>, ddp with 2 GPUs" in html
    assert "<dd><code>/home/alice/proj</code>, where it starts: shared by every run of it</dd>" in html
    # Its batch script noted no code (no record): said so, not left blank.
    assert '<dd id="run-code">unknown: its batch script noted no code' in html
    assert "cannot tell whether its code changed since: its script&#39;s sha256 was not noted" in html
    assert "torchrun: one torchrun per node" in html
    assert "<code>--lr 0.05</code>, <code>--amp true</code>" in html
    # The names of its variables, not their values; the spec table has only what a program reads.
    assert '<dd id="run-env"><code>API_KEY</code></dd>' in html and "s3cret-value" not in html
    assert '<th scope="row">gpus</th>' in html and '<th scope="row">model</th>' not in html
    # A program plans no number of epochs: the progress says how many it has done.
    assert page_data(html)["epochs"] is None
    assert '<dd id="run-progress">3 epochs done</dd>' in html
    assert 'id="run-warning" class="notice" role="status" hidden' in html
    # params_style env: the parameters are variables, no words after the command.
    env_spec = program_spec(params={"lr": 0.05}, params_style="env")
    by_env = run_row(session, experiment, tmp_path / "env", run_spec=env_spec, position=1)
    html = client.get(f"/runs/{by_env.id}").text
    assert '<dd id="run-params"><code>SCALELAB_PARAM_LR=0.05</code></dd>' in html
    assert "followed by its parameters" not in html
    runs_html = client.get("/runs").text
    assert re.search(r'data-epochs=""', runs_html) and '<td class="hide-narrow">program</td>' in runs_html


def test_a_run_again_of_a_program_says_whether_it_started_the_code_of_the_run_it_repeats(
    client, session: Session, tmp_path: Path
):
    experiment = experiment_row(session)
    original = run_row(session, experiment, tmp_path / "a", run_spec=program_spec(), state=RunState.completed)
    again = run_row(session, experiment, tmp_path / "b", run_spec=program_spec(), position=1, rerun_of=original.id)
    for run, sha in ((original, "aa"), (again, "bb")):
        code = {"v": 1, "kind": "code", "script": {"name": "train.py", "bytes": 3, "sha256": sha * 32}}
        session.add(Metric(run_id=run.id, offset=0, kind="code", record=code))
    session.commit()
    html = client.get(f"/runs/{again.id}").text
    assert "its script differs from the one that run started (sha256 bbbbbbbbbbbb, not aaaaaaaaaaaa)" in html
    assert '<dd id="run-code">train.py sha256 bbbbbbbbbbbb' in html


def test_a_program_that_printed_no_epoch_shows_the_servers_warning(client, session: Session, tmp_path: Path):
    experiment = experiment_row(session)
    warning = "the program printed no [METRIC] epoch line: print one per epoch (contract/metrics.py)"
    run = run_row(session, experiment, tmp_path, run_spec=program_spec(), state=RunState.completed, message=warning)
    html = client.get(f"/runs/{run.id}").text
    assert f'<p id="run-warning" class="notice" role="status">{warning}</p>' in html.replace("&#34;", '"')
    # A built-in run's page has no program section.
    other = run_row(session, experiment, tmp_path / "other", state=RunState.completed, position=1)
    assert 'id="run-program"' not in client.get(f"/runs/{other.id}").text
