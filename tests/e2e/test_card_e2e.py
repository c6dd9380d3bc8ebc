"""A scaling card of real Slurm runs, on the two-node cluster: exported with the batch scripts Slurm ran and the
provenance the jobs reported, verified by the server that ran them, and carried into another instance (SQLite) with
the same figures."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from contract.card import hashed
from server.config import Settings
from server.scheduler.local import LocalScheduler
from tests.conftest import make_client
from tests.factories import experiment_request

pytestmark = [pytest.mark.slurm, pytest.mark.torch]


def test_a_card_of_slurm_runs_verifies_and_travels(slurm2_server, tmp_path):
    request = experiment_request(
        name="card canary",
        # With a pre-flight: the 2-process run's card carries what it measured of the fabric, fitted again on verify.
        base={
            "model": "mlp",
            "dataset": "synthetic",
            "epochs": 2,
            "global_batch_size": 64,
            "seed": 0,
            "fabric_preflight": True,
        },
        grid={"strategy": ["ddp"], "gpus": [1, 2]},
        resources={"nodes": 1, "time_limit": "00:10:00"},
    )
    response = httpx.post(f"{slurm2_server}/api/experiments", json=request, timeout=60)
    assert response.status_code == 201, response.text
    experiment = response.json()["id"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        runs = httpx.get(f"{slurm2_server}/api/runs", params={"experiment_id": experiment}, timeout=10).json()["data"]
        if all(run["state"] in ("completed", "failed") and run["ingest_done"] for run in runs):
            break
        time.sleep(1)
    assert [run["state"] for run in runs] == ["completed", "completed"], json.dumps(runs, indent=1)

    card = httpx.get(f"{slurm2_server}/api/experiments/{experiment}/card", timeout=60).json()
    for run in card["runs"]:
        assert "#SBATCH" in run["batch_script"] and run["provenance"]["job_id"]
        assert run["provenance"]["torch_version"] and run["provenance"]["hardware"]
        assert {"start", "epoch", "end", "launch"} <= {record["record"]["kind"] for record in run["records"]}
    assert card["runs"][0]["provenance"]["fabric"] is None  # one process: no fabric to measure
    measured = card["runs"][1]["provenance"]["fabric"]["measured"]
    assert [(item["tier"], item["preflight"], item["processes_per_node"]) for item in measured] == [
        ("intra_node", True, 2)
    ]
    verdict = httpx.post(f"{slurm2_server}/api/cards/verify", json=card, timeout=60).json()
    assert (verdict["verified"], verdict["problems"]) == (True, [])

    # Edited and hashed again, it is refused by the server that ran it, naming the figure.
    edited = json.loads(json.dumps(card))
    epoch = next(item for item in edited["runs"][1]["records"] if item["record"]["kind"] == "epoch")
    epoch["record"]["epoch_time_s"] *= 3
    problems = httpx.post(f"{slurm2_server}/api/cards/verify", json=hashed(edited), timeout=60).json()["problems"]
    assert any(problem["field"].startswith("figures.compare.data[1].") for problem in problems), problems

    other = Settings(database_url=f"sqlite:///{tmp_path / 'b.db'}", runs_dir=tmp_path / "b-runs", scheduler="local")
    with make_client(other, LocalScheduler(tmp_path / "b-local")) as there:
        created = there.post("/api/cards", json=card)
        assert created.status_code == 201, created.text
        here = created.json()
        ids = {old["id"]: new["id"] for old, new in zip(card["runs"], here["runs"], strict=True)}
        ids[experiment] = here["id"]
        text = json.dumps(card["figures"]["scaling"])
        for old, new in ids.items():
            text = text.replace(old, new)
        assert there.get(f"/api/experiments/{here['id']}/scaling").json() == json.loads(text)
