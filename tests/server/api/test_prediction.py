"""GET /api/experiments/{id}/prediction and /api/prediction: the step model beside the measured points, on both
databases; compare rows and their CSV carry predicted_step_time_s and off_model."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from sqlmodel import Session

from contract.fabric import AlphaBeta, Tier
from contract.records import TimingRecord, WorkerRecord
from server.models import Experiment, FlagCode, Run
from server.services.comparison import predicted
from tests.factories import epoch, experiment_row, printed_run, run_row, spec, start
from tests.server.services.ingestion.test_fabric_store import INTRA, measured, probe_run

# A fabric fit given outright (the fabric probe's store answers in production): 100 us and 1 GB/s within a node.
FITS = {Tier.intra_node: AlphaBeta(1e-4, 1e9)}
BATCH = 64


@pytest.fixture
def fits(monkeypatch):
    monkeypatch.setattr(predicted, "fits_lookup", lambda session, run_id, run_spec, backend: FITS)


def timed_run(
    session: Session, experiment: Experiment, run_dir: Path, gpus: int, compute: float, comm: float = 0.0
) -> Run:
    """A finished ddp run of mlp whose two epochs say its step took `compute` + `comm` (0.01 s data, 0.01 s
    optimizer besides), with a timing record per rank."""
    parts = {"data": 0.01, "compute": compute, "optimizer": 0.01, "comm": comm}
    step = sum(parts.values())
    records: list[WorkerRecord] = [start()]
    for number in (1, 2):
        records.append(epoch(number, 1.0, step_time_s=step, time_breakdown=parts))
        records += [
            TimingRecord(
                epoch=number,
                rank=rank,
                steps=10,
                step_s=step,
                data_s=0.01,
                compute_s=compute,
                optimizer_s=0.01,
                comm_s=comm,
                comm_overlapped_s=0.0 if gpus > 1 else None,
                method="test",
            )
            for rank in range(gpus)
        ]
    fields = {"model": "mlp", "gpus": gpus, "global_batch_size": BATCH}
    return printed_run(session, experiment, run_dir, records, **fields)


def test_predicted_before_any_multi_process_run_has_finished(client, session, tmp_path, fits):
    experiment = experiment_row(session)
    one = timed_run(session, experiment, tmp_path / "1", gpus=1, compute=0.08)
    two = run_row(session, experiment, tmp_path / "2", run_spec=spec(model="mlp", gpus=2, global_batch_size=BATCH))

    body = client.get(f"/api/experiments/{experiment.id}/prediction").json()

    (series,) = body["series"]
    assert series["reference_run_id"] == one.id and series["strategy"] == "ddp"
    first, second = series["points"]
    assert (first["gpus"], second["gpus"]) == (1, 2)
    assert first["step_time_s"] == pytest.approx(0.1) and first["comm_s"] == 0
    assert second["compute_s"] == pytest.approx(0.09 / 2 + 0.01)  # forward, backward and data halve; DDP's step not
    assert second["comm_s"] > 0 and second["bubble_s"] == 0
    assert 1 < second["speedup"] < 2 and second["efficiency"] == pytest.approx(second["speedup"] / 2)
    assert second["run_ids"] == [two.id] and second["measured_step_time_s"] is None and second["residual"] is None
    assert body["fits"] == [{"tier": "intra_node", "alpha_s": 1e-4, "beta_bytes_per_s": 1e9}]
    assert body["tolerance"] == 0.5


def test_a_point_slower_than_the_model_in_communication_is_off_model(client, session, tmp_path, fits):
    experiment = experiment_row(session)
    timed_run(session, experiment, tmp_path / "1", gpus=1, compute=0.08)
    fine = timed_run(session, experiment, tmp_path / "2", gpus=2, compute=0.035)
    slow = timed_run(session, experiment, tmp_path / "4", gpus=4, compute=0.0125, comm=0.3)

    body = client.get("/api/prediction", params={"experiment_id": experiment.id}).json()
    points = {point["gpus"]: point for point in body["series"][0]["points"]}
    assert abs(points[2]["residual"]) < 0.5 and points[4]["residual"] > 1

    rows = {
        row["run_id"]: row for row in client.get("/api/compare", params={"experiment_id": experiment.id}).json()["data"]
    }
    assert rows[fine.id]["predicted_step_time_s"] == pytest.approx(points[2]["step_time_s"])
    assert FlagCode.off_model not in {flag["code"] for flag in rows[fine.id]["flags"]}
    (flag,) = [flag for flag in rows[slow.id]["flags"] if flag["code"] == FlagCode.off_model]
    assert "the communication does not add up" in flag["message"]

    text = client.get("/api/compare.csv", params={"experiment_id": experiment.id}).text
    csv_rows = {row["run_id"]: row for row in csv.DictReader(io.StringIO(text))}
    assert float(csv_rows[slow.id]["predicted_step_time_s"]) == pytest.approx(points[4]["step_time_s"])


def test_without_a_fit_or_a_one_process_run_it_says_so(client, session, tmp_path):
    experiment = experiment_row(session)
    timed_run(session, experiment, tmp_path / "2", gpus=2, compute=0.035)
    (series,) = client.get(f"/api/experiments/{experiment.id}/prediction").json()["series"]
    assert series["reference_run_id"] is None and "finished 1-process run" in series["basis"]
    assert series["points"] == []

    timed_run(session, experiment, tmp_path / "1", gpus=1, compute=0.08)
    (series,) = client.get(f"/api/experiments/{experiment.id}/prediction").json()["series"]
    two = next(point for point in series["points"] if point["gpus"] == 2)
    assert two["step_time_s"] is None and "no intra-node fabric fit" in two["unavailable"]


def test_an_unknown_experiment_is_not_found(client):
    response = client.get("/api/experiments/nope/prediction")
    assert response.status_code == 404 and "no experiment 'nope'" in response.text


def test_the_fits_are_the_fabric_stores_for_the_runs_profile_partition_and_shape(client, session, tmp_path):
    """No fits given: a probe of this partition at 2 processes per node, stored as the monitor stores one, is what
    the prediction of a 2-process run reads; a comparison kept from before the probe is not answered again."""
    experiment = experiment_row(session)
    runs = [timed_run(session, experiment, tmp_path / str(gpus), gpus=gpus, compute=0.08 / gpus) for gpus in (1, 2)]
    for run in runs:
        run.profile, run.partition = "twonode", "debug"
        session.add(run)
    session.commit()
    rows = client.get("/api/compare", params={"experiment_id": experiment.id}).json()["data"]
    assert [row["predicted_step_time_s"] is None for row in rows] == [False, True]  # 1 process: no fit needed

    (tmp_path / "probes").mkdir()
    probes = experiment_row(session, "probes")  # of its own: the compared selection stays the same runs
    probe_run(session, probes, tmp_path / "probes", measured(Tier.intra_node, INTRA, nodes=1, per_node=2), nodes=1,
              per_node=2)  # fmt: skip
    body = client.get(f"/api/experiments/{experiment.id}/prediction").json()

    (fit,) = body["fits"]
    assert fit["tier"] == "intra_node"
    assert fit["alpha_s"] == pytest.approx(INTRA.alpha_s, rel=1e-3)
    assert fit["beta_bytes_per_s"] == pytest.approx(INTRA.beta_bytes_per_s, rel=1e-3)
    two = next(point for point in body["series"][0]["points"] if point["gpus"] == 2)
    assert two["step_time_s"] is not None and two["comm_s"] > 0
    rows = client.get("/api/compare", params={"experiment_id": experiment.id}).json()["data"]
    by_run = {row["run_id"]: row["predicted_step_time_s"] for row in rows}
    assert by_run[runs[1].id] == pytest.approx(two["step_time_s"])
