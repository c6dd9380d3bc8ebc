"""POST /api/plans, GET /api/plans/{id}, POST /api/plans/{id}/experiment on both databases: the probes and 1-process
runs a plan submits, its answer once they have ended (built from their stored records, as the monitor would read
them: every grid point predicted, each goal's recommendation, the GPU-hours), and its refusals."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from contract.fabric import AlphaBeta, Tier
from contract.records import TimingRecord, WorkerRecord, format_record
from contract.rundir import OUTPUT_FILE
from contract.spec import RunSpec
from contract.states import RunState
from server.config import Settings
from server.models import Run
from server.scheduler.local import LocalScheduler
from server.services import fabric, plans
from server.services.estimate import estimate_memory
from server.services.ingestion.parsing import ingest
from tests.conftest import make_client
from tests.factories import epoch, experiment_request, start
from tests.server.services.ingestion.test_fabric_store import measured

FAST = AlphaBeta(alpha_s=1e-5, beta_bytes_per_s=1e10)  # communication far below compute: scales nearly linearly
SLOW = AlphaBeta(alpha_s=1e-2, beta_bytes_per_s=1e5)  # communication far above compute: more GPUs are slower


class Unlaunched(LocalScheduler):
    """The local scheduler up to the subprocess boundary: it gives job ids and starts nothing (the test writes what
    the jobs would have printed)."""

    def submit(self, script: Path, run_dir: Path, user: str | None = None) -> str:
        return f"local-{secrets.token_hex(5)}"


@pytest.fixture
def planner(settings: Settings) -> Iterator[TestClient]:
    with make_client(settings, Unlaunched(settings.runs_dir / ".local-jobs")) as client:
        yield client


def _finish(session: Session, run_id: str, records: list[WorkerRecord]) -> None:
    """The run ended having printed these records, and the monitor read them to the end."""
    run = session.get(Run, run_id)
    assert run is not None
    (Path(run.run_dir) / OUTPUT_FILE).write_text("".join(format_record(record) + "\n" for record in records))
    run.state = RunState.completed
    ingest(session, run)
    run.ingest_done = True
    session.add(run)
    if run.spec.get("kind") == "probe":
        fabric.conclude(session, run)
    session.commit()


def _reference_records(compute: float) -> list[WorkerRecord]:
    parts = {"data": 0.01, "compute": compute, "optimizer": 0.01, "comm": 0.0}
    step = sum(parts.values())
    records: list[WorkerRecord] = [start()]
    for number in (1, 2):
        records.append(epoch(number, 1.0, step_time_s=step, time_breakdown=parts))
        records.append(
            TimingRecord(
                epoch=number, rank=0, steps=10, step_s=step, data_s=0.01, compute_s=compute, optimizer_s=0.01,
                comm_s=0.0, comm_overlapped_s=None, method="test",
            )
        )  # fmt: skip
    return records


def _request(**grid: Any) -> dict[str, Any]:
    return experiment_request(grid={"strategy": ["ddp"], "gpus": [1, 2, 4], **grid}, repeats=2)


def finish_plan(session: Session, plan: dict[str, Any], fit: AlphaBeta) -> None:
    """Its probes measured `fit` within a node, its 1-process runs timed 0.08 s of compute a step."""
    for run_id in plan["probe_run_ids"]:
        run = session.get(Run, run_id)
        assert run is not None
        spec = RunSpec.model_validate(run.spec)
        _finish(session, run_id, list(measured(Tier.intra_node, fit, nodes=spec.nodes, per_node=spec.gpus_per_node)))
    for run_id in plan["reference_run_ids"].values():
        _finish(session, run_id, _reference_records(0.08))


def _finished_plan(client: TestClient, session: Session, fit: AlphaBeta, goal: str, **query: Any) -> dict[str, Any]:
    created = client.post("/api/plans", json=_request(), params={"goal": goal, **query})
    assert created.status_code == 201, created.text
    plan = created.json()
    finish_plan(session, plan, fit)
    answer = client.get(f"/api/plans/{plan['id']}")
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_a_plan_submits_a_probe_per_shape_and_a_1_process_run_per_strategy(planner, session):
    response = planner.post("/api/plans", json=_request(strategy=["ddp", "fsdp"]), params={"probe_seconds": 3})

    assert response.status_code == 201, response.text
    plan = response.json()
    assert plan["state"] == "running" and plan["points"] == [] and plan["recommendation"] is None
    runs = [session.get(Run, run_id) for run_id in plan["waiting_for"]]
    specs = [RunSpec.model_validate(run.spec) for run in runs if run is not None]
    probes = [spec for spec in specs if spec.kind.value == "probe"]
    assert sorted((spec.nodes, spec.gpus_per_node) for spec in probes) == [(1, 2), (1, 4)]
    assert {spec.probe_seconds for spec in probes} == {3}
    references = [spec for spec in specs if spec.kind.value == "train"]
    assert sorted(spec.strategy.value for spec in references) == ["ddp", "fsdp"]
    assert all(spec.gpus == 1 and spec.epochs == 2 and spec.width is None for spec in references)
    assert len(specs) == 4 and sorted(plan["reference_run_ids"]) == ["ddp", "fsdp"]
    experiment = planner.get(f"/api/experiments/{plan['id']}").json()
    assert experiment["run_count"] == 4 and experiment["name"].startswith("plan: ")


@pytest.mark.parametrize(
    ("fields", "strategy"),
    [
        ({"strategy": "ddp", "gpus": 4, "epochs": 6}, "ddp"),
        ({"strategy": "fsdp", "gpus": 4, "fsdp_sharding": "hybrid", "nodes": 2}, "fsdp"),
        ({"strategy": "fsdp_tp", "gpus": 4, "tp_degree": 2, "model": "gpt", "dataset": "text"}, "single"),
    ],
)
def test_a_strategy_is_timed_on_one_process_as_itself_or_else_as_single(fields, strategy):
    reference = plans.reference_spec(RunSpec.model_validate(fields))

    assert (reference.strategy.value, reference.gpus, reference.nodes) == (strategy, 1, 1)
    assert reference.epochs == min(fields.get("epochs", 2), plans.REFERENCE_EPOCHS)
    assert reference.model.value == fields.get("model", "mlp")


def test_every_grid_point_is_predicted_with_its_memory_and_gpu_hours(planner, session):
    answer = _finished_plan(planner, session, FAST, "fastest_epoch")

    assert answer["state"] == "ready" and answer["waiting_for"] == [] and answer["failed"] == []
    points = answer["points"]
    assert [point["gpus"] for point in points] == [1, 2, 4]
    assert all(point["unavailable"] is None and point["step_time_s"] > 0 for point in points)
    assert points[0]["speedup"] == pytest.approx(1) and 1 < points[1]["speedup"] < points[2]["speedup"] < 4
    for point in points:
        spec = RunSpec.model_validate(point["spec"])
        assert point["repeats"] == 2
        assert point["memory_per_gpu_bytes"] == estimate_memory(spec).total_bytes
        assert point["gpu_hours"] == pytest.approx(point["epoch_time_s"] * 4 * point["gpus"] * 2 / 3600)
        # The step's parts, as the step model adds them up: the 1-process point communicates nothing.
        parts = point["compute_s"] + point["comm_s"] + point["bubble_s"]
        assert point["compute_s"] > 0 and parts == pytest.approx(point["step_time_s"])
        assert (point["comm_s"] > 0) == (point["gpus"] > 1)
    assert answer["grid_gpu_hours"] == pytest.approx(sum(point["gpu_hours"] for point in points))
    assert answer["gpu_hours_complete"] is True
    assert [fit["tier"] for fit in answer["fits"]] == ["intra_node"]
    fastest = min(points, key=lambda point: point["epoch_time_s"])
    assert fastest["gpus"] == 4
    assert answer["recommendation"]["gpus"] == 4 and answer["recommendation"]["strategy"] == "ddp"
    assert answer["recommended_gpu_hours"] == pytest.approx(fastest["gpu_hours"])
    assert "shortest predicted epoch" in answer["recommendation"]["why"]


def test_the_recommendation_follows_the_goal_and_the_fabric(planner, session):
    slow_fastest = _finished_plan(planner, session, SLOW, "fastest_epoch")
    slow_efficient = _finished_plan(planner, session, SLOW, "largest_n_at_efficiency", efficiency=0.8)
    fast_efficient = _finished_plan(planner, session, FAST, "largest_n_at_efficiency", efficiency=0.5)

    # On a slow fabric more GPUs only add communication: one process is fastest, and the only one efficient enough.
    efficiencies = {point["gpus"]: point["efficiency"] for point in slow_efficient["points"]}
    assert efficiencies[1] == pytest.approx(1) and efficiencies[2] < 0.8 and efficiencies[4] < 0.8
    assert slow_fastest["recommendation"]["gpus"] == 1
    assert slow_efficient["recommendation"]["gpus"] == 1
    assert "at least 0.8" in slow_efficient["recommendation"]["why"]
    # On a fast one the most GPUs keep their efficiency.
    assert fast_efficient["recommendation"]["gpus"] == 4 and fast_efficient["efficiency"] == 0.5
    assert slow_efficient["recommended_gpu_hours"] < slow_efficient["grid_gpu_hours"]


def test_a_plan_becomes_an_experiment_of_the_points_it_recommends(planner, session):
    answer = _finished_plan(planner, session, FAST, "fastest_epoch")

    created = planner.post(f"/api/plans/{answer['id']}/experiment")

    assert created.status_code == 201, created.text
    experiment_id = created.json()["id"]
    runs = planner.get("/api/runs", params={"experiment_id": experiment_id}).json()["data"]
    assert len(runs) == 2  # the recommended point's two repeats
    assert {(run["spec"]["strategy"], run["spec"]["gpus"]) for run in runs} == {("ddp", 4)}


def test_a_failed_1_process_run_leaves_its_points_unpredicted_and_says_so(planner, session):
    plan = planner.post("/api/plans", json=_request()).json()
    for run_id in plan["probe_run_ids"]:
        _finish(session, run_id, list(measured(Tier.intra_node, FAST, nodes=1, per_node=2)))
    run = session.get(Run, plan["reference_run_ids"]["ddp"])
    assert run is not None
    run.state, run.ingest_done = RunState.failed, True
    session.add(run)
    session.commit()

    answer = planner.get(f"/api/plans/{plan['id']}").json()

    assert answer["state"] == "failed" and answer["failed"] == [run.id]
    assert all("1-process run" in point["unavailable"] for point in answer["points"])
    assert answer["recommendation"] is None and answer["grid_gpu_hours"] is None
    assert answer["gpu_hours_complete"] is False
    refused = planner.post(f"/api/plans/{plan['id']}/experiment")
    assert refused.status_code == 409 and "recommends nothing" in refused.text


def test_a_running_plan_names_what_it_waits_for_and_cannot_become_an_experiment(planner):
    plan = planner.post("/api/plans", json=_request()).json()

    answer = planner.get(f"/api/plans/{plan['id']}").json()
    refused = planner.post(f"/api/plans/{plan['id']}/experiment")

    assert answer["state"] == "running" and len(answer["waiting_for"]) == 3
    assert refused.status_code == 409 and "still running 3 run(s)" in refused.text


@pytest.mark.parametrize(
    ("body", "params", "field"),
    [
        (experiment_request(base={"kind": "probe"}), {}, ["body", "base", "kind"]),
        (experiment_request(resources={"partition": "nowhere", "time_limit": "00:10:00"}), {}, None),
        (experiment_request(grid={"strategy": ["warp"]}), {}, None),
        (experiment_request(), {"goal": "cheapest"}, ["query", "goal"]),
        (experiment_request(), {"efficiency": 1.5}, ["query", "efficiency"]),
        (experiment_request(), {"probe_seconds": 0}, ["query", "probe_seconds"]),
    ],
)
def test_a_refused_plan_names_the_field_and_submits_nothing(planner, body, params, field):
    response = planner.post("/api/plans", json=body, params=params)

    assert response.status_code == 422, response.text
    locations = [error["loc"] for error in response.json()["detail"]]
    assert field is None or field in locations
    if field is None:  # checked as POST /api/experiments checks it: the same field named
        assert locations == [error["loc"] for error in planner.post("/api/experiments", json=body).json()["detail"]]
    assert planner.get("/api/experiments").json()["count"] == 0


def test_an_unknown_plan_or_an_experiment_that_is_not_one_is_404(planner):
    experiment = planner.post("/api/experiments", json=experiment_request()).json()

    assert planner.get("/api/plans/nosuchplan").status_code == 404
    missing = planner.get(f"/api/plans/{experiment['id']}")
    assert missing.status_code == 404 and "not a plan" in missing.text
    assert planner.post(f"/api/plans/{experiment['id']}/experiment").status_code == 404


def test_a_plan_s_experiment_is_deleted_with_its_plan(planner, session):
    answer = _finished_plan(planner, session, FAST, "fastest_epoch")

    deleted = planner.delete(f"/api/experiments/{answer['id']}")

    assert deleted.status_code == 204, deleted.text
    assert planner.get(f"/api/plans/{answer['id']}").status_code == 404
