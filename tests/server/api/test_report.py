"""GET /api/experiments/{id}/report.html: the report of real ingested runs, as a file to save."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from contract.rundir import SCRIPT_FILE
from tests.factories import epoch, experiment_row, printed_run, start

# Where the test leaves the report of a three-run experiment, to look at or measure.
ARTIFACT = Path(__file__).resolve().parents[3] / "test-artifacts" / "report-3-runs.html"


def test_the_report_of_an_experiment_is_one_html_file(client, session, tmp_path):
    experiment = experiment_row(session, "ddp on 1, 2 and 4 GPUs <b>")
    # Two epochs each, the second 8/gpus s after a slower first one: speed-up is the GPU ratio.
    runs = [
        printed_run(
            session, experiment, tmp_path / str(gpus), [start(), epoch(1, 20.0), epoch(2, 8.0 / gpus)], gpus=gpus
        )
        for gpus in (1, 2, 4)
    ]
    (Path(runs[0].run_dir) / SCRIPT_FILE).write_text("#!/bin/bash\n#SBATCH --nodes=1\nsrun python -m worker\n")

    response = client.get(f"/api/experiments/{experiment.id}/report.html")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-disposition"] == f'inline; filename="scalelab-{experiment.id}-report.html"'
    html = response.text
    assert "<h1>ddp on 1, 2 and 4 GPUs &lt;b&gt;</h1>" in html
    assert all(run.id in html for run in runs)
    assert "#SBATCH --nodes=1" in html and f'Of run <span class="id">{runs[0].id}</span>' in html
    assert html.count('<svg class="chart"') == 3  # time, speed-up, efficiency
    assert ">n1</td>" in html  # the host the start record names
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(html)


def test_an_experiment_without_runs_still_has_a_report(client, session):
    experiment = experiment_row(session, "nothing yet")
    html = client.get(f"/api/experiments/{experiment.id}/report.html").text
    assert "No timed points to chart yet" in html and "Not available" in html


def test_an_unknown_experiment_is_404(client):
    response = client.get("/api/experiments/nosuch/report.html")
    assert response.status_code == 404
    assert response.json()["detail"] == "no experiment 'nosuch'"


def test_the_report_needs_a_token_like_the_other_routes(client, session):
    experiment = experiment_row(session)
    assert TestClient(client.app).get(f"/api/experiments/{experiment.id}/report.html").status_code == 401


def test_the_report_is_documented_as_html(client):
    route = client.get("/openapi.json").json()["paths"]["/api/experiments/{experiment_id}/report.html"]["get"]
    assert list(route["responses"]["200"]["content"]) == ["text/html"]
    assert {"401", "404"} <= set(route["responses"])
