"""The fabric through the API: a probe experiment submitted and rendered like a training run, its refusals, and
GET /api/fabric's entries (shape, points with their bandwidths, fit, run, when) and filters, on both databases."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from contract.fabric import Collective, Tier, bus_factor
from contract.records import StartRecord, format_record
from contract.rundir import SCRIPT_FILE
from tests.factories import experiment_row
from tests.server.api.test_experiments import error_locs
from tests.server.services.ingestion.test_fabric_store import INTER, INTRA, measured, probe_run

PROBE = {"name": "the fabric", "base": {"kind": "probe", "probe_seconds": 3}, "grid": {"gpus": [2]}}


def test_a_probe_experiment_runs_the_worker_s_probe_in_its_allocation(client, tmp_path):
    response = client.post("/api/experiments", json=PROBE)
    assert response.status_code == 201, response.text
    (run,) = response.json()["runs"]
    assert (run["spec"]["kind"], run["spec"]["gpus"], run["spec"]["probe_seconds"]) == ("probe", 2, 3)
    script = (tmp_path / "runs" / run["id"] / SCRIPT_FILE).read_text()
    assert " -m worker probe --spec " in script
    (estimate,) = client.post("/api/experiments/preview", json=PROBE).json()["estimates"]
    assert estimate["estimate"] is None and estimate["warning"].startswith("no estimate: a fabric probe")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"base": {"kind": "probe", "model": "gpt"}}, "model"),  # a probe trains nothing
        ({"base": {"kind": "probe", "probe_seconds": 0.5}}, "probe_seconds"),
        ({"base": {"kind": "probe"}, "grid": {"gpus": [1]}}, "one process"),
    ],
)
def test_a_probe_that_cannot_measure_is_refused_naming_why(client, change, field):
    response = client.post("/api/experiments/preview", json={**PROBE, **change})
    assert error_locs(response)
    assert field in response.text


def test_the_fabric_lists_each_tier_with_its_points_fit_and_run(client, engine, tmp_path):
    with Session(engine) as session:
        experiment = experiment_row(session)
        records = measured(Tier.intra_node, INTRA, nodes=2, per_node=2) + measured(
            Tier.inter_node, INTER, nodes=2, per_node=2
        )
        run = probe_run(session, experiment, tmp_path, records, nodes=2, per_node=2)
        probe_run(session, experiment, tmp_path, measured(Tier.intra_node, INTRA, nodes=1, per_node=2, backend="nccl"),
                  nodes=1, per_node=2, profile="other", partition="gpu", ended_ago_s=60)  # fmt: skip
        run_id = run.id
    body = client.get("/api/fabric", params={"profile": "twonode"}).json()
    assert body["count"] == 2
    tiers = {entry["shape"]["tier"]: entry for entry in body["data"]}
    intra = tiers["intra_node"]
    assert intra["shape"] == {
        "profile": "twonode", "partition": "debug", "nodes": 2, "processes_per_node": 2, "backend": "gloo",
        "tier": "intra_node",
    }  # fmt: skip
    assert (intra["run_id"], intra["preflight"], intra["ranks"]) == (run_id, False, 2)
    assert intra["alpha_s"] == pytest.approx(INTRA.alpha_s, rel=1e-3)
    assert intra["beta_bytes_per_s"] == pytest.approx(INTRA.beta_bytes_per_s, rel=1e-3)
    point = next(p for p in intra["points"] if p["collective"] == "all_reduce" and p["nbytes"] == 1024 * 2**7)
    assert point["algbw_bytes_per_s"] == pytest.approx(point["nbytes"] / point["seconds"])
    assert point["busbw_bytes_per_s"] == pytest.approx(
        point["algbw_bytes_per_s"] * bus_factor(Collective.all_reduce, 2)
    )
    assert intra["measured_at"]
    # Filters: by backend and partition; the newest first over all.
    assert [e["shape"]["profile"] for e in client.get("/api/fabric", params={"backend": "nccl"}).json()["data"]] == [
        "other"
    ]
    assert client.get("/api/fabric", params={"partition": "none"}).json() == {"data": [], "count": 0}
    assert client.get("/api/fabric").json()["count"] == 3
    assert client.get("/api/fabric", params={"preflight": True}).json()["count"] == 0


@pytest.mark.parametrize("query", [{"profile": "a b"}, {"backend": "NCCL;"}, {"partition": "x" * 65}])
def test_a_filter_that_names_nothing_storable_is_refused(client, query):
    (name,) = query
    assert error_locs(client.get("/api/fabric", params=query)) == [("query", name)]


def probe_log(nodes: int, per_node: int) -> str:
    """The output of a probe over `nodes` x `per_node` processes on a fabric that follows INTRA and INTER."""
    start = StartRecord(world_size=nodes * per_node, nodes=nodes, device="cpu", backend="gloo", strategy="probe")
    records: list = [start, *measured(Tier.intra_node, INTRA, nodes=nodes, per_node=per_node)]
    if nodes > 1:
        records += measured(Tier.inter_node, INTER, nodes=nodes, per_node=per_node)
    return "".join(format_record(record) + "\n" for record in records)


def test_an_imported_probe_log_is_a_probe_run_whose_measurements_are_kept(client):
    created = client.post(
        "/api/imports", json={"name": "a probe", "files": [{"name": "probe.out", "content": probe_log(2, 2)}]}
    )
    assert created.status_code == 201, created.text
    (run,) = client.get("/api/runs", params={"experiment_id": created.json()["id"]}).json()["data"]
    assert (run["spec"]["kind"], run["spec"]["gpus"], run["spec"]["nodes"]) == ("probe", 4, 2)
    entries = client.get("/api/fabric").json()["data"]
    assert {(entry["shape"]["tier"], entry["run_id"]) for entry in entries} == {
        ("intra_node", run["id"]), ("inter_node", run["id"]),
    }  # fmt: skip
    assert {entry["shape"]["profile"] for entry in entries} == {""}  # an imported run was rendered for no profile
