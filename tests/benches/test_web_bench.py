"""The web benchmark at a tiny scale: every figure is printed, the seeded counts are exact, and the bulk seeding
writes what ingestion writes. No timing is asserted: the figures are the benchmark's to print."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, col, select

from benches.web import DEFAULT_MLFLOW_VENV
from benches.web_seed import counted
from benches.web_workload import plan
from server.db import make_engine
from server.models import Experiment, Metric, Run, RunSummary

REPO = Path(__file__).resolve().parent.parent.parent
RUNS, POINTS = 200, 20_000
TIMEOUT_S = 600  # generous: the machine is shared, and this starts two servers


def bench(tmp_path: Path, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "benches.web", "--runs", str(RUNS), "--points", str(POINTS), "--tmp", str(tmp_path),
         *args],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def figures_of(output: str, label: str) -> list[str]:
    """The cells after a row's label in a printed table; the row must be there."""
    line = next((line for line in output.splitlines() if line.startswith(label)), None)
    assert line is not None, f"no row {label!r} in:\n{output}"
    return line[len(label) :].split()


def by_run(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Each run's history, summary and message, by its experiment's name and its position."""
    engine = make_engine(f"sqlite:///{path}")
    found: dict[tuple[str, int], dict[str, Any]] = {}
    with Session(engine) as session:
        names = dict(session.exec(select(Experiment.id, Experiment.name)).all())
        for run in session.exec(select(Run)).all():
            history = session.exec(select(Metric).where(Metric.run_id == run.id).order_by(col(Metric.offset))).all()
            summary = session.get(RunSummary, run.id)
            found[(names[run.experiment_id], run.position)] = {
                "history": [(m.offset, m.kind, m.epoch, m.record) for m in history],
                "summary": summary.model_dump(exclude={"run_id"}) if summary else None,
                "message": run.message,
                "log_offset": run.log_offset,
            }
    engine.dispose()
    return found


def test_prints_every_figure_with_exact_counts(tmp_path: Path) -> None:
    output = bench(tmp_path, "--repeats", "2", "--no-mlflow")
    workload = plan(RUNS, POINTS)
    assert f"seeded {RUNS} runs ({len(workload.experiments)} experiments, " in output
    assert f" and {POINTS:,} metric records (+" in output
    for label in (
        "runs page",
        "dashboard of the 32-run experiment",
        "compare, 100 runs  ",
        "compare, 100 runs, history",
    ):
        median, p95, server_cpu, _, _, _, result = figures_of(output, label)[-7:]
        assert float(median) > 0 and float(p95) >= float(median)
        assert float(server_cpu) >= 0  # read from /proc: these tests run on Linux
        assert result in ("pass", "MISS")
    for label in (f"create {RUNS} runs, s", f"log {POINTS:,} records, s", "query 100 runs' latest figures, median ms",
                  "query 100 runs with histories, median ms"):  # fmt: skip
        (value,) = figures_of(output, label)
        assert float(value) > 0
    assert "MLflow: left out" in output

    seeded, ingested = tmp_path / "pages" / "scalelab.db", tmp_path / "scalelab" / "scalelab.db"
    for path in (seeded, ingested):
        counts = counted(make_engine(f"sqlite:///{path}"))
        assert (counts["run"], counts["metric"]) == (RUNS, POINTS)
        assert counts["experiment"] == len(workload.experiments)
    printing = sum(1 for run in workload.runs if run.points)
    assert counted(make_engine(f"sqlite:///{seeded}"))["runsummary"] == printing
    dashboard = workload.experiments[0]
    assert len(dashboard.runs) == 32
    # The bulk seeding writes, run by run, what the monitor's ingestion of the same output writes.
    assert by_run(seeded) == by_run(ingested)


def test_workload_is_exact_and_realistic() -> None:
    workload = plan(10_000, 2_000_000)
    assert (workload.run_count, workload.point_count) == (10_000, 2_000_000)
    assert 200 <= len(workload.experiments) <= 1000
    assert len(workload.experiments[0].runs) == 32
    runs = list(workload.runs)
    assert len({run.owner for run in runs}) >= 5
    assert {run.spec["strategy"] for run in runs} >= {"ddp", "fsdp", "tp"}
    assert {run.spec["gpus"] for run in runs} == {1, 2, 4, 8}
    assert {"completed", "failed", "running", "pending"} <= {run.state for run in runs}
    assert len(workload.queried()) == 100


@pytest.mark.skipif(not (DEFAULT_MLFLOW_VENV / "bin" / "python").exists(), reason="MLflow's environment is not made")
def test_mlflow_side_by_side(tmp_path: Path) -> None:
    runs, points = 40, 2000
    result = subprocess.run(
        [sys.executable, "-m", "benches.web", "--runs", str(runs), "--points", str(points), "--repeats", "2",
         "--tmp", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout
    queried = len(plan(runs, points).queried())
    for label in (f"create {runs} runs, s", f"log {points:,} records, s", f"query {queried} runs' latest figures",
                  f"query {queried} runs with histories"):  # fmt: skip
        cells = figures_of(output, label)
        assert re.fullmatch(r"\d+(\.\d+)?x", cells[-1]), cells
    match = re.search(r"MLflow stores the records as ([\d,]+) metric values", output)
    assert match is not None and int(match.group(1).replace(",", "")) >= points
