"""The scaling card: exported from a finished experiment, verified by recomputing every figure from its records,
imported into another instance as a read-only experiment with the same figures; and refused, naming the field, when
a figure was edited, a record removed, a provenance field dropped, or the file is no card at all."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from sqlmodel import Session, select

from contract.card import CARD_VERSION, content_hash, hashed
from contract.records import EndRecord, EpochRecord, LaunchRecord, NodeHardware, StartRecord, format_record
from server.config import Settings
from server.models import CardOrigin, RunAccounting
from tests.conftest import make_client
from tests.server.api.test_experiments import counts, error_locs

DIGEST = "sha256:" + "ab" * 32


def worker_log(gpus: int, seconds: float, *, epochs: int = 3) -> str:
    """A worker's output on `gpus` processes in an image named by its digest, each epoch taking about `seconds`."""
    host = NodeHardware(
        host="n1", ranks=list(range(gpus)), hardware_threads=8, cpus_given=8, affinity="0-7", intra_op_threads=1
    )
    start = StartRecord(
        world_size=gpus, nodes=1, device="cpu", backend="gloo", strategy="ddp", torch_version="2.5",
        worker_version="0.1.0", image="ghcr.io/scalelab/worker:1", image_digest=DIGEST, source_revision="abc123",
        nodes_hardware=[host],
    )  # fmt: skip
    lines = [format_record(LaunchRecord(event="start", at=1.8e9))]
    lines.append(format_record(start))
    for epoch in range(1, epochs + 1):
        took = seconds * (1.0 + 0.01 * epoch)
        record = EpochRecord(
            epoch=epoch, train_loss=1 / epoch, val_loss=1.1 / epoch, val_accuracy=0.5 + epoch / 20,
            epoch_time_s=took, samples_per_s=6400 / took,
        )  # fmt: skip
        lines.append(format_record(record))
    lines.append(format_record(EndRecord(status="completed", total_time_s=seconds * epochs + 1)))
    lines.append(format_record(LaunchRecord(event="end", at=1.8e9 + seconds * epochs + 2, exit_status=0)))
    return "\n".join(lines) + "\n"


def finished_experiment(client) -> str:
    """An experiment of six finished runs, two repeats at 1, 2 and 4 processes, with stored records (imported from
    their logs, as ingestion stores a run's output) and Slurm's accounting for one of them."""
    logs = [
        (f"run{gpus}_{repeat}.out", worker_log(gpus, 8.0 / gpus + repeat * 0.1))
        for gpus in (1, 2, 4)
        for repeat in (0, 1)
    ]
    response = client.post(
        "/api/imports", json={"name": "canary", "files": [{"name": name, "content": text} for name, text in logs]}
    )
    assert response.status_code == 201, response.text
    created = response.json()
    with Session(client.app.state.engine) as session:
        session.add(RunAccounting(run_id=created["runs"][0]["id"], job_id="77", elapsed_s=30, alloc_cpus=8))
        session.commit()
    return str(created["id"])


@pytest.fixture
def card(client) -> dict[str, Any]:
    experiment_id = finished_experiment(client)
    response = client.get(f"/api/experiments/{experiment_id}/card")
    assert response.status_code == 200, response.text
    assert response.headers["content-disposition"] == f'attachment; filename="scalelab-{experiment_id}-card.json"'
    return dict(response.json())


def problems(client, card: dict[str, Any]) -> list[tuple[str, str]]:
    response = client.post("/api/cards/verify", json=card)
    assert response.status_code == 200, response.text
    verdict = response.json()
    assert verdict["verified"] is not verdict["problems"]
    return [(problem["field"], problem["message"]) for problem in verdict["problems"]]


def fields(client, card: dict[str, Any]) -> list[str]:
    return [field for field, _ in problems(client, card)]


def test_a_card_holds_what_its_figures_come_from_and_verifies(client, card):
    assert card["card_version"] == CARD_VERSION == 2
    assert card["content_hash"] == content_hash(card)
    assert card["source"]["scalelab_version"] and card["source"]["url"].startswith("http")
    assert len(card["runs"]) == 6
    first = card["runs"][0]
    assert first["provenance"]["image_digest"] == DIGEST
    assert first["provenance"]["hardware"][0]["host"] == "n1"
    assert [record["record"]["kind"] for record in first["records"]][:3] == ["launch", "start", "epoch"]
    assert first["accounting"]["job_id"] == "77"
    points = card["figures"]["scaling"]["series"][0]["points"]
    assert [(point["gpus"], point["n"]) for point in points] == [(1, 2), (2, 2), (4, 2)]
    assert card["figures"]["compare"]["histories"][first["id"]][0]["epoch"] == 1
    verdict = client.post("/api/cards/verify", json=card).json()
    assert verdict["problems"] == []
    assert (verdict["verified"], verdict["problems"], verdict["runs"], verdict["records"]) == (True, [], 6, 42)


def test_a_version_1_card_still_verifies_and_imports(client, card):
    """Version 2 added the band a pre-flight was judged against: a card of version 1 with no run flagged
    fabric_degraded is read as it was written (tests/server/api/test_card_fabric.py: one with such a run)."""
    old = hashed({**copy.deepcopy(card), "card_version": 1})
    assert problems(client, old) == []
    imported = client.post("/api/cards", json=old)
    assert imported.status_code == 201, imported.text
    assert imported.json()["card"]["card_version"] == 1


def test_an_edited_epoch_time_is_named_even_when_the_card_is_hashed_again(client, card):
    edited = copy.deepcopy(card)
    edited["runs"][2]["records"][3]["record"]["epoch_time_s"] = 0.5
    # Changed without hashing again: the hash says so first.
    assert fields(client, edited)[0] == "content_hash"
    # Hashed again, as anyone may: the figures computed from the edited record are not the card's.
    found = problems(client, hashed(edited))
    assert found, "an edited epoch time must not verify"
    assert "content_hash" not in [field for field, _ in found]
    assert ("figures.compare.data[2].epoch_time_min_s") in [field for field, _ in found]
    assert all(field.startswith("figures.") for field, _ in found)
    message = dict(found)["figures.compare.data[2].epoch_time_min_s"]
    assert message.startswith("the card says ") and "its records give 0.5" in message


def test_an_edited_figure_is_named(client, card):
    edited = copy.deepcopy(card)
    edited["figures"]["scaling"]["series"][0]["points"][2]["speedup"] = 3.9
    assert fields(client, hashed(edited)) == ["figures.scaling.series[0].points[2].speedup"]


def test_a_deleted_record_is_named(client, card):
    edited = copy.deepcopy(card)
    del edited["runs"][1]["records"][4]  # an epoch record
    found = fields(client, hashed(edited))
    assert found[0] == "runs[1].records"
    # Its count mended too, the figures still tell: the run's epochs are one fewer than the card says.
    edited["runs"][1]["records_read"] -= 1
    found = fields(client, hashed(edited))
    assert "figures.compare.data[1].epochs_done" in found


def test_a_missing_image_digest_is_named(client, card):
    edited = copy.deepcopy(card)
    edited["runs"][0]["provenance"]["image_digest"] = None
    found = problems(client, hashed(edited))
    assert found == [("runs[0].provenance.image_digest", f"the card says null; its records tell {DIGEST!r}")]
    # Without the field at all, the card is no card: refused naming it.
    del edited["runs"][0]["provenance"]["image_digest"]
    response = client.post("/api/cards/verify", json=hashed(edited))
    assert error_locs(response) == [("body", "runs", 0, "provenance", "image_digest")]


def test_a_card_travels_to_another_instance_with_the_same_figures(client, card, tmp_path, local_scheduler):

    other = Settings(
        database_url=f"sqlite:///{tmp_path / 'other.db'}", runs_dir=tmp_path / "other-runs", scheduler="local"
    )
    with make_client(other, local_scheduler) as there:
        response = there.post("/api/cards", json=card)
        assert response.status_code == 201, response.text
        created = response.json()
        assert created["card"]["original_id"] == card["experiment"]["id"]
        assert created["card"]["content_hash"] == card["content_hash"]
        assert created["card"]["imported_by"]
        assert [run["origin"] for run in created["runs"]] == ["imported"] * 6
        assert created["request"] == card["experiment"]["request"]
        log = there.get(f"/api/runs/{created['runs'][0]['id']}/log").json()
        assert log["complete"] and "imported from a scaling card" in log["text"]
        shown = there.get(f"/api/experiments/{created['id']}").json()
        assert shown["card"]["url"] == card["source"]["url"]
        page = there.get(f"/experiments/{created['id']}")
        assert page.status_code == 200
        assert "Imported from a scaling card: experiment" in page.text and card["content_hash"] in page.text
        assert "Imported from a scaling card" not in client.get(f"/experiments/{card['experiment']['id']}").text

        # Its figures are the card's, but for the ids this instance gave.
        ids = {old["id"]: new["id"] for old, new in zip(card["runs"], created["runs"], strict=True)}
        ids[card["experiment"]["id"]] = created["id"]
        expected = json.loads(_renamed(json.dumps(card["figures"]["scaling"]), ids))
        assert there.get(f"/api/experiments/{created['id']}/scaling").json() == expected
        rows = there.get(f"/api/experiments/{created['id']}/compare").json()["data"]
        assert rows == json.loads(_renamed(json.dumps(card["figures"]["compare"]["data"]), ids))

        # Exported again from there, it verifies there and here.
        again = there.get(f"/api/experiments/{created['id']}/card").json()
        assert there.post("/api/cards/verify", json=again).json()["verified"]
        assert client.post("/api/cards/verify", json=again).json()["verified"]
        # Its runs there bear the ids its records are recomputed under: no figure kept of them there may stand in.
        again["runs"][0]["records"][3]["record"]["epoch_time_s"] = 0.5
        assert "figures.compare.data[0].epoch_time_min_s" in fields(there, hashed(again))

        # Carried twice, the card is compared with itself by the regression test: the same spec, indistinguishable
        # at every point. Pinned, the first carried copy is the second's reference, as a canary at another site.
        twin = there.post("/api/cards", json=card).json()
        assert there.put(f"/api/experiments/{created['id']}/reference").status_code == 200
        verdict = there.get(f"/api/experiments/{twin['id']}/regression").json()
        assert (verdict["reference_id"], verdict["against"], verdict["same_spec"]) == (created["id"], "pinned", True)
        assert verdict["verdict"] == "indistinguishable", verdict["summary"]
        assert [point["verdict"] for point in verdict["points"]] == ["indistinguishable"] * 3
        assert all(point["ratio"] == pytest.approx(1.0) for point in verdict["points"])
        assert there.delete(f"/api/experiments/{created['id']}/reference").status_code == 204

        # Read-only: each change is refused saying why.
        experiment = created["id"]
        run = created["runs"][0]["id"]
        for path in (
            f"/api/experiments/{experiment}/cancel",
            f"/api/experiments/{experiment}/resubmit",
            f"/api/experiments/{experiment}/rerun",
            f"/api/runs/{run}/cancel",
            f"/api/runs/{run}/resubmit",
            f"/api/runs/{run}/rerun",
        ):
            refused = there.post(path)
            assert refused.status_code == 409, (path, refused.text)
            assert "imported from a scaling card" in refused.json()["detail"], path
        assert there.delete(f"/api/runs/{run}").status_code == 409
        # The whole experiment may go, its origin with it.
        assert there.delete(f"/api/experiments/{experiment}").status_code == 204
        with Session(engine_of(there)) as session:
            assert [origin.experiment_id for origin in session.exec(select(CardOrigin))] == [twin["id"]]


def engine_of(client) -> Any:
    return client.app.state.engine


def _renamed(text: str, ids: dict[str, str]) -> str:
    for old, new in ids.items():
        text = text.replace(old, new)
    return text


def test_a_card_that_does_not_verify_is_not_imported(client, card):
    before = counts(client)
    edited = copy.deepcopy(card)
    edited["figures"]["compare"]["data"][0]["mean_epoch_time_s"] = 1.0
    response = client.post("/api/cards", json=hashed(edited))
    assert error_locs(response) == [("body", "figures", "compare", "data", 0, "mean_epoch_time_s")]
    assert counts(client) == before


def test_a_live_experiment_has_no_card(client):
    created = client.post("/api/experiments", json={"name": "x", "base": {"epochs": 1}}).json()
    response = client.get(f"/api/experiments/{created['id']}/card")
    assert response.status_code == 409
    assert "have not ended" in response.json()["detail"]


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        (lambda card: card.update(card_version=CARD_VERSION + 1), ("body", "card_version")),
        (lambda card: card.update(runs=[]), ("body", "runs")),
        (
            lambda card: card["runs"][0].update(records=[{"offset": -1, "record": {}}]),
            ("body", "runs", 0, "records", 0, "offset"),
        ),
        (lambda card: card["figures"].update(compare=_nested(40)), ("body", "figures", "compare")),
        (lambda card: card["experiment"].update(request={"x": "y" * 70_000}), ("body", "experiment", "request")),
        (lambda card: card["runs"][0].update(surprise=1), ("body", "runs", 0, "surprise")),
        (
            lambda card: card["runs"][0]["provenance"].update(image="i" * 5000),
            ("body", "runs", 0, "provenance", "image"),
        ),
    ],
)
def test_a_card_is_a_strangers_input(client, card, change, loc):
    change(card)
    assert error_locs(client.post("/api/cards/verify", json=card))[0] == loc


def test_a_record_the_ingestion_would_refuse_is_named(client, card):
    card["runs"][0]["records"][2]["record"]["epoch_time_s"] = "soon"
    found = fields(client, hashed(card))
    assert found == ["runs[0].records[2].record"]


def test_broken_json_is_refused(client):
    response = client.post(
        "/api/cards/verify", content=b'{"card_version": 1,', headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "json_invalid"
    deep = b"[" * 100_000 + b"]" * 100_000
    response = client.post("/api/cards/verify", content=deep, headers={"content-type": "application/json"})
    assert response.status_code in (400, 422), response.text
