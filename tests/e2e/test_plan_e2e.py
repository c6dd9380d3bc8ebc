"""A plan on the real two-node cluster: POST /api/plans submits its fabric probes (one per shape of the grid's
multi-process points) and its 1-process run, they really run, and GET /api/plans/{id} answers with every grid point
predicted from their records and a recommendation. Probes of a few seconds, a 1-process run of four steps."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import slurm2_server_in
from tests.e2e.runs import output_of

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

# Two points across both nodes: 1 and 2 processes per node, so two probe shapes, (2, 1) and (2, 2).
REQUEST = {
    "name": "ddp over two nodes, planned",
    "base": {"model": "mlp", "dataset": "synthetic", "strategy": "ddp", "epochs": 1, "steps_per_epoch": 4,
             "global_batch_size": 64},
    "grid": {"gpus": [2, 4]},
    "resources": {"nodes": 2, "time_limit": "00:05:00"},
    "isolation": "shared",  # the three runs at once
}  # fmt: skip


@pytest.fixture(scope="module")
def planned(slurm2_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("plan2")
    with slurm2_server_in(folder, slurm2_env) as url:
        query: dict[str, str | int] = {"goal": "largest_n_at_efficiency", "probe_seconds": 3}
        created = httpx.post(f"{url}/api/plans", json=REQUEST, params=query, timeout=120)
        assert created.status_code == 201, created.text
        plan = created.json()
        deadline = time.monotonic() + 400
        answer = plan
        while answer["state"] == "running" and time.monotonic() < deadline:
            time.sleep(2)
            answer = httpx.get(f"{url}/api/plans/{plan['id']}", timeout=30).json()
        outputs = {run_id: output_of(url, run_id)[-2000:] for run_id in answer["failed"]}
        assert answer["state"] == "ready", f"{answer}\n{outputs}\n{(folder / 'server.log').read_text()[-3000:]}"
        yield {"created": plan, "answer": answer}


def test_a_plan_runs_its_probes_and_1_process_run_then_predicts_every_point(planned):
    created, answer = planned["created"], planned["answer"]
    assert len(created["probe_run_ids"]) == 2 and list(created["reference_run_ids"]) == ["ddp"]
    assert created["state"] == "running" and len(created["waiting_for"]) == 3
    points = answer["points"]
    assert [(point["gpus"], point["nodes"]) for point in points] == [(2, 2), (4, 2)]
    assert all(point["unavailable"] is None and point["epoch_time_s"] > 0 for point in points), points
    assert all(point["memory_per_gpu_bytes"] > 0 and point["gpu_hours"] > 0 for point in points)
    assert {fit["tier"] for fit in answer["fits"]} == {"intra_node", "inter_node"}
    assert answer["grid_gpu_hours"] == pytest.approx(sum(point["gpu_hours"] for point in points))
    # The 2-GPU point is its series' smallest: efficiency 1, so at least it meets the default 0.8.
    assert points[0]["efficiency"] == pytest.approx(1)
    recommendation = answer["recommendation"]
    assert recommendation["strategy"] == "ddp" and recommendation["gpus"] in (2, 4)
    chosen = next(point for point in points if point["gpus"] == recommendation["gpus"])
    assert chosen["efficiency"] >= 0.8
