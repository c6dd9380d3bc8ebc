"""A scaling card's fabric provenance on both databases: a run's own fabric measurements (its pre-flight) and the
stored fits its prediction reads travel on the card; `card verify` recomputes the first from the run's records and
checks the second against the predictions, and a run flagged fabric_degraded verifies as any other."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from contract.card import hashed
from contract.fabric import AlphaBeta, Collective, Tier
from contract.records import StartRecord, TimingRecord, WorkerRecord
from server.config import Settings
from server.models import Run
from server.services import fabric
from tests.conftest import make_client
from tests.factories import epoch, experiment_request
from tests.server.api.test_plans import Unlaunched, _finish
from tests.server.services.ingestion.test_fabric_store import measured

FIT = AlphaBeta(alpha_s=1e-4, beta_bytes_per_s=1e9)


@pytest.fixture
def submitter(settings: Settings) -> Iterator[TestClient]:
    with make_client(settings, Unlaunched(settings.runs_dir / ".local-jobs")) as client:
        yield client


def _training(gpus: int, compute: float, extra: list[WorkerRecord]) -> list[WorkerRecord]:
    """A ddp run on `gpus` processes of one node that timed its steps, with `extra` records after its start."""
    comm = 0.0 if gpus == 1 else 0.02
    parts = {"data": 0.01, "compute": compute, "optimizer": 0.01, "comm": comm}
    step = sum(parts.values())
    start = StartRecord(
        world_size=gpus, nodes=1, device="cpu", backend="gloo", strategy="ddp", torch_version="2", hostname="n1"
    )
    records: list[WorkerRecord] = [start, *extra]
    for number in (1, 2):
        records.append(epoch(number, 1.0, step_time_s=step, time_breakdown=parts))
        records.append(
            TimingRecord(
                epoch=number, rank=0, steps=10, step_s=step, data_s=0.01, compute_s=compute, optimizer_s=0.01,
                comm_s=comm, comm_overlapped_s=0.0, method="test",
            )
        )  # fmt: skip
    return records


def _runs(client: TestClient, request: dict[str, Any]) -> list[str]:
    created = client.post("/api/experiments", json=request)
    assert created.status_code == 201, created.text
    return [run["id"] for run in created.json()["runs"]]


@pytest.fixture
def experiment(submitter: TestClient, session: Session) -> str:
    """A probe of 2 processes on one node, then a ddp experiment on 1 and 2 processes whose 2-process run's
    pre-flight reaches a tenth of the probe's bandwidth: flagged fabric_degraded, and predicted from the probe."""
    (probe,) = _runs(submitter, experiment_request(name="probe", base={"kind": "probe"}, grid={"gpus": [2]}))
    _finish(session, probe, list(measured(Tier.intra_node, FIT, nodes=1, per_node=2)))
    request = experiment_request(name="ddp", grid={"gpus": [1, 2]}, repeats=1)
    one, two = _runs(submitter, request)
    _finish(session, one, _training(1, 0.08, []))
    slow = measured(Tier.intra_node, FIT, nodes=1, per_node=2, preflight=True, collectives=(Collective.all_reduce,))
    slow = [
        record.model_copy(
            update={
                "seconds": record.seconds * 10,
                "busbw_bytes_per_s": record.busbw_bytes_per_s / 10,
                "algbw_bytes_per_s": record.algbw_bytes_per_s / 10,
            }
        )
        for record in slow
    ]
    _finish(session, two, _training(2, 0.04, list(slow)))
    run = session.get(Run, two)
    assert run is not None
    fabric.conclude(session, run)  # as the monitor does once a run's output is read
    session.commit()
    return run.experiment_id


def _card(client: TestClient, experiment_id: str) -> dict[str, Any]:
    response = client.get(f"/api/experiments/{experiment_id}/card")
    assert response.status_code == 200, response.text
    return dict(response.json())


def _problems(client: TestClient, card: dict[str, Any]) -> list[tuple[str, str]]:
    verdict = client.post("/api/cards/verify", json=card).json()
    return [(problem["field"], problem["message"]) for problem in verdict["problems"]]


def test_a_run_flagged_fabric_degraded_and_predicted_from_a_probe_verifies(submitter, experiment):
    card = _card(submitter, experiment)
    rows = {row["run_id"]: row for row in card["figures"]["compare"]["data"]}
    two = next(run for run in card["runs"] if run["spec"]["gpus"] == 2)
    assert "fabric_degraded" in [flag["code"] for flag in rows[two["id"]]["flags"]]
    assert rows[two["id"]]["predicted_step_time_s"] is not None
    assert _problems(submitter, card) == []


def test_the_card_carries_the_run_s_own_measurements_and_the_fits_its_prediction_read(submitter, experiment):
    card = _card(submitter, experiment)
    one, two = sorted(card["runs"], key=lambda run: run["spec"]["gpus"])
    assert one["provenance"]["fabric"] is None  # one process: nothing measured, no fit read
    carried = two["provenance"]["fabric"]
    (own,) = carried["measured"]
    assert (own["tier"], own["preflight"], own["processes_per_node"]) == ("intra_node", True, 2)
    assert own["degraded"].startswith("the fabric pre-flight measured")
    (fit,) = carried["fits"]
    probe = next(run for run in _all_runs(submitter) if run["spec"].get("kind") == "probe")
    assert (fit["tier"], fit["run_id"], fit["processes_per_node"]) == ("intra_node", probe["id"], 2)
    assert fit["alpha_s"] == pytest.approx(FIT.alpha_s) and fit["beta_bytes_per_s"] == pytest.approx(
        FIT.beta_bytes_per_s
    )
    assert carried["partition"] == two["spec"].get("partition", carried["partition"]) and carried["partition"]


def _all_runs(client: TestClient) -> list[dict[str, Any]]:
    return list(client.get("/api/runs").json()["data"])


def _edited(card: dict[str, Any], change: Any) -> dict[str, Any]:
    edited = copy.deepcopy(card)
    change(next(run for run in edited["runs"] if run["spec"]["gpus"] == 2)["provenance"]["fabric"])
    return hashed(edited)


def test_an_edited_measurement_or_fit_is_named(submitter, experiment):
    card = _card(submitter, experiment)
    index = next(at for at, run in enumerate(card["runs"]) if run["spec"]["gpus"] == 2)
    # What the run measured is fitted again from its records.
    faster = _edited(card, lambda fabric: fabric["measured"][0].update(beta_bytes_per_s=1e12))
    assert [field for field, _ in _problems(submitter, faster)] == [f"runs[{index}].provenance.fabric"]
    # A fit is taken as the card says, and the prediction made from it must be the card's.
    fit = _edited(card, lambda fabric: fabric["fits"][0].update(beta_bytes_per_s=1e3))
    fields = [field for field, _ in _problems(submitter, fit)]
    assert f"figures.compare.data[{index}].predicted_step_time_s" in fields
    # Its degraded verdict travels as the card says, and the flag in the figures follows it.
    healthy = _edited(card, lambda fabric: fabric["measured"][0].update(degraded=None))
    fields = [field for field, _ in _problems(submitter, healthy)]
    assert f"figures.compare.data[{index}].flags" in fields


@pytest.mark.parametrize(
    "change",
    [
        lambda fabric: fabric["fits"][0].update(alpha_s=-1.0),
        lambda fabric: fabric["fits"][0].update(tier="rack"),
        lambda fabric: fabric["fits"][0].update(measured_at="yesterday"),
        lambda fabric: fabric.update(measured=[fabric["measured"][0]] * 17),
    ],
)
def test_a_fabric_beyond_its_bounds_is_refused_naming_it(submitter, experiment, change):
    card = _edited(_card(submitter, experiment), change)
    response = submitter.post("/api/cards/verify", json=card)
    if response.status_code == 200:
        fields = [problem["field"] for problem in response.json()["problems"]]
        assert any(".provenance.fabric" in field for field in fields), fields
    else:
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert any("fabric" in [str(part) for part in item["loc"]] for item in detail), detail
