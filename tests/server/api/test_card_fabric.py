"""A scaling card's fabric provenance on both databases: a run's own fabric measurements (its pre-flight, with the
band it was judged against) and the stored fits its prediction reads travel on the card; `card verify` recomputes
the first from the run's records, draws its fabric_degraded verdict again against the card's band with the server's
flag rule, and checks the fits against the predictions; an imported card keeps its prediction and its flag."""

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
from server.profiles import FabricBand
from server.services import fabric
from tests.conftest import make_client
from tests.factories import epoch, experiment_request
from tests.server.api.test_experiments import error_locs
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


# The profile's reference band a pre-flight is judged against in the `profile_reference` case: far above what it
# measures (about 0.06 GB/s), so it is flagged.
BAND = FabricBand(busbw_gb_per_s=(50.0, 60.0), source="nccl-tests all_reduce_perf on the nodes, 2026-11")


@pytest.fixture(params=["earlier_probes", "profile_reference"])
def experiment(request: pytest.FixtureRequest, submitter: TestClient, session: Session) -> str:
    """A probe of 2 processes on one node, then a ddp experiment on 1 and 2 processes whose 2-process run's
    pre-flight reaches a tenth of the probe's bandwidth: flagged fabric_degraded (against the probe's spread, or
    against the profile's reference band), and predicted from the probe."""
    (probe,) = _runs(submitter, experiment_request(name="probe", base={"kind": "probe"}, grid={"gpus": [2]}))
    _finish(session, probe, list(measured(Tier.intra_node, FIT, nodes=1, per_node=2)))
    one, two = _runs(submitter, experiment_request(name="ddp", grid={"gpus": [1, 2]}, repeats=1))
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
    reference = {Tier.intra_node: {"gloo": BAND}} if request.param == "profile_reference" else None
    fabric.conclude(session, run, reference)  # as the monitor does once a run's output is read
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


def test_the_card_carries_the_band_the_pre_flight_was_judged_against(submitter, experiment, request):
    card = _card(submitter, experiment)
    two = next(run for run in card["runs"] if run["spec"]["gpus"] == 2)
    (own,) = two["provenance"]["fabric"]["measured"]
    band = own["expected"]
    if request.node.callspec.params["experiment"] == "profile_reference":
        assert band["basis"] == "profile_reference"
        assert (band["low_bytes_per_s"], band["high_bytes_per_s"]) == (50e9, 60e9)
        assert BAND.source in band["source"] and BAND.source in own["degraded"]
    else:
        # The spread of the earlier probe at the pre-flight's largest size, its low end less the margin.
        assert band["basis"] == "earlier_probes"
        assert band["low_bytes_per_s"] == pytest.approx(band["high_bytes_per_s"] * (1 - fabric.SPREAD_MARGIN))
        assert "earlier probe" in band["source"] and band["source"] in own["degraded"]


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
    change(edited["runs"][_index(edited)]["provenance"]["fabric"])
    return hashed(edited)


def _index(card: dict[str, Any]) -> int:
    """Where the 2-process training run is in the card's runs."""
    return next(
        at for at, run in enumerate(card["runs"]) if run["spec"]["gpus"] == 2 and run["spec"].get("kind") != "probe"
    )


def _row(card: dict[str, Any]) -> int:
    """Where the 2-process training run is in the card's compare rows."""
    run_id = card["runs"][_index(card)]["id"]
    return next(at for at, row in enumerate(card["figures"]["compare"]["data"]) if row["run_id"] == run_id)


def test_an_edited_measurement_or_fit_is_named(submitter, experiment):
    card = _card(submitter, experiment)
    index = _index(card)
    # What the run measured is fitted again from its records.
    faster = _edited(card, lambda fabric: fabric["measured"][0].update(beta_bytes_per_s=1e12))
    fields = [field for field, _ in _problems(submitter, faster)]
    assert fields == [f"runs[{index}].provenance.fabric.measured[0].beta_bytes_per_s"]
    # A fit is taken as the card says, and the prediction made from it must be the card's.
    fit = _edited(card, lambda fabric: fabric["fits"][0].update(beta_bytes_per_s=1e3))
    fields = [field for field, _ in _problems(submitter, fit)]
    assert f"figures.compare.data[{_row(card)}].predicted_step_time_s" in fields


def _healthy(card: dict[str, Any]) -> dict[str, Any]:
    """The card edited to say the run's pre-flight was not degraded, its verdict and its flag both, hashed again:
    every figure consistent with the edit."""
    edited = copy.deepcopy(card)
    index = _index(edited)
    edited["runs"][index]["provenance"]["fabric"]["measured"][0]["degraded"] = None
    for holder in (edited["figures"]["compare"]["data"][_row(edited)], edited["figures"]["scaling"]):
        holder["flags"] = [flag for flag in holder["flags"] if flag["code"] != "fabric_degraded"]
    return hashed(edited)


def test_a_verdict_edited_with_its_flag_is_named(submitter, experiment):
    """The verdict is drawn again from the records against the card's band: an edit that keeps the figures
    consistent with it (the flag removed too) is still found. Before the card carried the band, the verdict was
    taken as the card said, and this card verified."""
    card = _card(submitter, experiment)
    problems = _problems(submitter, _healthy(card))
    field = f"runs[{_index(card)}].provenance.fabric.measured[0].degraded"
    fields = [name for name, _ in problems]
    assert fields and fields[0] == field and all(name.startswith("figures.") for name in fields[1:]), fields
    message = dict(problems)[field]
    assert message.startswith("the card says null; its records give ") and "the fabric pre-flight measured" in message
    assert f"{field[: -len('degraded')]}expected" in message


@pytest.mark.parametrize(
    "edit",
    [
        # Below what it measured: no longer degraded by the flag's rule.
        lambda band: band.update(low_bytes_per_s=1e3),
        # The source the sentence names.
        lambda band: band.update(source="the vendor's datasheet"),
        # No band at all: nothing expected, so no flag.
        None,
    ],
)
def test_an_edited_band_is_named(submitter, experiment, edit):
    card = _card(submitter, experiment)
    index = _index(card)

    def change(fabric: dict[str, Any]) -> None:
        if edit is None:
            fabric["measured"][0]["expected"] = None
        else:
            edit(fabric["measured"][0]["expected"])

    problems = _problems(submitter, _edited(card, change))
    field, message = problems[0]
    assert field == f"runs[{index}].provenance.fabric.measured[0].degraded"
    assert f"runs[{index}].provenance.fabric.measured[0].expected" in message
    # The figures drawn from the verdict follow it: the run's fabric_degraded flag.
    assert any(name.startswith(f"figures.compare.data[{_row(card)}].flags") for name, _ in problems[1:]), problems


def test_a_fit_of_a_probe_the_card_holds_must_be_that_probe_s(submitter, session, experiment):
    """With the probe run in the experiment too, the card holds it: a fit the prediction read from it is checked
    against what its records give, not only through the prediction."""
    probe = next(run for run in _all_runs(submitter) if run["spec"].get("kind") == "probe")
    row = session.get(Run, probe["id"])
    assert row is not None
    row.experiment_id, row.position = experiment, 2
    session.add(row)
    session.commit()
    card = _card(submitter, experiment)
    assert len(card["runs"]) == 3 and _problems(submitter, card) == []
    index = _index(card)
    fit = _edited(card, lambda fabric: fabric["fits"][0].update(alpha_s=1.0))
    problems = dict(_problems(submitter, fit))
    assert f"figures.compare.data[{_row(card)}].predicted_step_time_s" in problems
    assert f"the records of probe run {probe['id']} give" in problems[f"runs[{index}].provenance.fabric.fits[0]"]


def version_1(card: dict[str, Any]) -> dict[str, Any]:
    """The card as version 1 wrote it: no band beside a pre-flight's verdict."""
    old = copy.deepcopy(card)
    old["card_version"] = 1
    for run in old["runs"]:
        for item in (run["provenance"]["fabric"] or {}).get("measured", []):
            del item["expected"]
    return hashed(old)


def test_a_version_1_card_with_a_degraded_pre_flight_is_refused_naming_the_version(submitter, experiment):
    card = version_1(_card(submitter, experiment))
    ((field, message),) = _problems(submitter, card)
    assert field == "card_version"
    assert message.startswith("card_version 1 carries no band a pre-flight was judged against")
    assert f"runs[{_index(card)}].provenance.fabric.measured[0].degraded" in message and "version 2" in message
    refused = submitter.post("/api/cards", json=card)
    assert refused.status_code == 422 and error_locs(refused) == [("body", "card_version")]


def test_an_imported_card_keeps_its_prediction_and_its_fabric_degraded_flag(
    submitter, experiment, tmp_path, local_scheduler
):
    """On another instance, which has no fabric of its own: the run's prediction and flag are the card's, its
    prediction says it read the card's fits, this instance's fabric store gains nothing, and exported again from
    there the card verifies there and here. Before the card's fabric was kept on import, both were absent there."""
    card = _card(submitter, experiment)
    mine = card["figures"]["compare"]["data"][_row(card)]
    other = Settings(
        database_url=f"sqlite:///{tmp_path / 'other.db'}", runs_dir=tmp_path / "other-runs", scheduler="local"
    )
    with make_client(other, local_scheduler) as there:
        created = there.post("/api/cards", json=card)
        assert created.status_code == 201, created.text
        imported = created.json()
        run_id = imported["runs"][_index(card)]["id"]
        rows = {row["run_id"]: row for row in there.get(f"/api/experiments/{imported['id']}/compare").json()["data"]}
        row = rows[run_id]
        assert row["predicted_step_time_s"] == pytest.approx(mine["predicted_step_time_s"])
        assert (
            [flag for flag in row["flags"] if flag["code"] == "fabric_degraded"]
            == [flag for flag in mine["flags"] if flag["code"] == "fabric_degraded"]
            != []
        )
        predicted = there.get(f"/api/experiments/{imported['id']}/prediction").json()
        (series,) = predicted["series"]
        assert "its scaling card carries" in series["basis"]
        assert there.get("/api/fabric").json()["count"] == 0
        again = there.get(f"/api/experiments/{imported['id']}/card").json()
        assert again["runs"][_index(card)]["provenance"]["fabric"] == card["runs"][_index(card)]["provenance"]["fabric"]
        assert _problems(there, again) == []
        assert _problems(submitter, again) == []


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
