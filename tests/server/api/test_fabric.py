"""The fabric through the API: a probe experiment submitted and rendered like a training run, its refusals,
GET /api/fabric's entries (shape, points with their bandwidths, fit, run, when) and filters, and a probe
experiment's runs with what each measured (GET /api/experiments/{id}/fabric; one run's: GET /api/runs/{id}/fabric), on
both databases."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from contract.fabric import Collective, Tier, bus_factor
from contract.records import StartRecord, format_record
from contract.rundir import SCRIPT_FILE
from contract.spec import RunSpec
from contract.states import FailureKind, RunState
from tests.factories import experiment_row, run_row
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
    # Its experiment's page is the probe view (its request names no kind: its runs say what they are).
    assert "js/probe.js" in client.get(f"/experiments/{created.json()['id']}").text


def test_a_probe_experiment_lists_its_probe_runs_with_shape_state_failure_and_each_tier_s_curve_and_fit(
    client, engine, tmp_path
):
    with Session(engine) as session:
        experiment = experiment_row(session, request={"name": "the fabric", "base": {"kind": "probe"}})
        records = measured(Tier.intra_node, INTRA, nodes=2, per_node=2) + measured(
            Tier.inter_node, INTER, nodes=2, per_node=2
        )
        measured_run = probe_run(session, experiment, tmp_path, records, nodes=2, per_node=2).id
        failed = run_row(
            session, experiment, tmp_path, run_spec=RunSpec(kind="probe", nodes=1, gpus=2), state=RunState.failed,
            position=1, ingest_done=True, failure_kind=FailureKind.launcher_error,
            failure_detail="srun: error: Unable to create step",
        ).id  # fmt: skip
        waiting = run_row(
            session, experiment, tmp_path, run_spec=RunSpec(kind="probe", nodes=2, gpus=2), position=2, partition=None
        ).id
        # A plan's experiment holds training runs beside its probes: only the probes are listed.
        trained = run_row(session, experiment, tmp_path, run_spec=RunSpec(gpus=1), position=3).id
        experiment_id = experiment.id
    body = client.get(f"/api/experiments/{experiment_id}/fabric").json()
    assert (body["experiment_id"], body["count"]) == (experiment_id, 3)
    first, second, third = body["data"]
    assert [first["run_id"], second["run_id"], third["run_id"]] == [measured_run, failed, waiting]
    shape = (first["state"], first["nodes"], first["processes_per_node"], first["backend"])
    assert shape == ("completed", 2, 2, "gloo")
    assert (first["profile"], first["partition"]) == ("twonode", "debug")
    assert [entry["shape"]["tier"] for entry in first["tiers"]] == ["intra_node", "inter_node"]
    intra, inter = first["tiers"]
    assert intra["alpha_s"] == pytest.approx(INTRA.alpha_s, rel=1e-3)
    assert inter["beta_bytes_per_s"] == pytest.approx(INTER.beta_bytes_per_s, rel=1e-3)
    assert len(intra["points"]) == 16 and intra["fit_error"] == pytest.approx(0, abs=1e-6)  # an exact fabric
    assert (second["failure_kind"], second["failure_detail"], second["ingest_done"]) == (
        "launcher_error", "srun: error: Unable to create step", True,
    )  # fmt: skip
    assert (second["nodes"], second["processes_per_node"], second["backend"], second["tiers"]) == (1, 2, None, [])
    assert (third["state"], third["partition"], third["ingest_done"]) == ("submitted", "", False)
    assert client.get("/api/experiments/nosuch/fabric").status_code == 404
    # A run's page reads its own row alone; a run of another kind has no fabric curves, as one that does not exist.
    for row in body["data"]:
        assert client.get(f"/api/runs/{row['run_id']}/fabric").json() == row
    assert client.get(f"/api/runs/{trained}/fabric").status_code == 404
    assert "not a fabric probe" in client.get(f"/api/runs/{trained}/fabric").json()["detail"]
    assert client.get("/api/runs/nosuch/fabric").status_code == 404


def test_the_fabric_filters_by_the_shape_a_probe_experiment_links_to(client, engine, tmp_path):
    with Session(engine) as session:
        experiment = experiment_row(session)
        both = measured(Tier.intra_node, INTRA, nodes=2, per_node=2) + measured(
            Tier.inter_node, INTER, nodes=2, per_node=2
        )
        probe_run(session, experiment, tmp_path, both, nodes=2, per_node=2)
        probe_run(session, experiment, tmp_path, measured(Tier.intra_node, INTRA, nodes=1, per_node=2), nodes=1,
                  per_node=2)  # fmt: skip
        probe_run(session, experiment, tmp_path, measured(Tier.inter_node, INTER, nodes=2, per_node=1), nodes=2,
                  per_node=1)  # fmt: skip

    def shapes(**query: int) -> set[tuple[int, int, str]]:
        entries = client.get("/api/fabric", params=query).json()["data"]
        return {(e["shape"]["nodes"], e["shape"]["processes_per_node"], e["shape"]["tier"]) for e in entries}

    assert shapes(nodes=2, processes_per_node=2) == {(2, 2, "intra_node"), (2, 2, "inter_node")}
    assert shapes(nodes=2) == {(2, 2, "intra_node"), (2, 2, "inter_node"), (2, 1, "inter_node")}
    assert shapes(processes_per_node=2) == {(2, 2, "intra_node"), (2, 2, "inter_node"), (1, 2, "intra_node")}
    assert shapes(nodes=3) == set()
    for refused in ({"nodes": 0}, {"processes_per_node": 9000}, {"nodes": "two"}):
        (name,) = refused
        assert error_locs(client.get("/api/fabric", params=refused)) == [("query", name)]
