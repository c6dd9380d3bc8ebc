"""The fabric probe on the real Slurm clusters: 2 gloo processes on the one-node cluster (its intra-node tier), and
2 nodes x 2 processes on the two-node cluster, whose intra- and inter-node tiers are measured and stored apart,
with a training run's pre-flight beside it. Probes of a few seconds (probe_seconds), a training run of one epoch."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import slurm2_server_in
from tests.e2e.runs import output_of, wait_until_ended
from tests.e2e.test_lifecycle import metrics_of, submit

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

COLLECTIVES = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv"}


def probe(gpus: int, nodes: int) -> dict[str, Any]:
    return {
        "name": f"fabric over {nodes} node(s), {gpus} processes",
        "base": {"kind": "probe", "probe_seconds": 4},
        "grid": {"gpus": [gpus]},
        "resources": {"nodes": nodes, "time_limit": "00:05:00"},
    }


TRAINING_WITH_PREFLIGHT = {
    "name": "ddp with a fabric pre-flight",
    "base": {"model": "mlp", "dataset": "synthetic", "strategy": "ddp", "epochs": 1, "steps_per_epoch": 4,
             "global_batch_size": 64, "fabric_preflight": True},
    "grid": {"gpus": [4]},
    "resources": {"nodes": 2, "time_limit": "00:05:00"},
}  # fmt: skip


def ended(url: str, experiment: dict[str, Any], log: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    (run,) = experiment["runs"]
    done = wait_until_ended(url, run["id"], log, timeout_s=300)
    assert (done["state"], done["exit_code"]) == ("completed", "0:0"), output_of(url, run["id"])
    return done, metrics_of(url, run["id"])


def fabric_of(url: str, run_id: str) -> dict[tuple[str, bool], dict[str, Any]]:
    entries = httpx.get(f"{url}/api/fabric", timeout=10).json()["data"]
    return {(entry["shape"]["tier"], entry["preflight"]): entry for entry in entries if entry["run_id"] == run_id}


def test_the_probe_measures_two_processes_on_the_one_node_cluster(slurm_server, tmp_path):
    run, records = ended(slurm_server, submit(slurm_server, probe(2, 1)), tmp_path / "server.log")
    measured = [record for record in records if record["kind"] == "fabric"]
    assert {record["collective"] for record in measured} == COLLECTIVES
    assert {(record["tier"], record["ranks"], record["backend"]) for record in measured} == {("intra_node", 2, "gloo")}
    # Sizes double from 1 KiB for each collective.
    sizes = [record["nbytes"] for record in measured if record["collective"] == "all_reduce"]
    assert sizes[:2] == [1024, 2048] and all(b == 2 * a for a, b in itertools.pairwise(sizes))
    (fit,) = [record for record in records if record["kind"] == "fabric_fit"]
    assert fit["tier"] == "intra_node" and fit["beta_bytes_per_s"] > 0
    (entry,) = fabric_of(slurm_server, run["id"]).values()
    assert entry["shape"] == {
        "profile": "local", "partition": entry["shape"]["partition"], "nodes": 1, "processes_per_node": 2,
        "backend": "gloo", "tier": "intra_node",
    }  # fmt: skip
    assert len(entry["points"]) == len(measured) and entry["beta_bytes_per_s"] > 0


@pytest.fixture(scope="module")
def two_nodes(slurm2_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A probe and a training run with its pre-flight on the two-node cluster, submitted at once."""
    folder = tmp_path_factory.mktemp("fabric2")
    with slurm2_server_in(folder, slurm2_env) as url:
        probing, training = submit(url, probe(4, 2)), submit(url, TRAINING_WITH_PREFLIGHT)
        log = folder / "server.log"
        yield {"url": url, "probe": ended(url, probing, log), "training": ended(url, training, log)}


def test_across_two_nodes_the_tiers_are_measured_and_stored_apart(two_nodes):
    url, (run, records) = two_nodes["url"], two_nodes["probe"]
    measured = [record for record in records if record["kind"] == "fabric"]
    tiers = {record["tier"]: record["ranks"] for record in measured if record["collective"] == "all_reduce"}
    assert tiers == {"intra_node": 2, "inter_node": 2}
    for tier in tiers:
        assert {record["collective"] for record in measured if record["tier"] == tier} == COLLECTIVES
    assert {record["tier"] for record in records if record["kind"] == "fabric_fit"} == set(tiers)
    stored = fabric_of(url, run["id"])
    assert set(stored) == {("intra_node", False), ("inter_node", False)}
    for (tier, _), entry in stored.items():
        shape = entry["shape"]
        assert (shape["profile"], shape["partition"], shape["nodes"], shape["processes_per_node"]) == (
            "twonode", "debug", 2, 2,
        )  # fmt: skip
        assert len(entry["points"]) == sum(record["tier"] == tier for record in measured)


def test_a_training_run_s_pre_flight_is_measured_before_training_and_stored_marked(two_nodes):
    url, (run, records) = two_nodes["url"], two_nodes["training"]
    kinds = [record["kind"] for record in records if record["kind"] not in ("memory", "timing", "launch", "compute")]
    # The pre-flight's records come after the start and before the first epoch: all-reduce only, marked.
    first_epoch = kinds.index("epoch")
    assert set(kinds[kinds.index("fabric") : first_epoch]) <= {"fabric", "fabric_fit", "start"}
    preflight = [record for record in records if record["kind"] == "fabric"]
    assert {(record["collective"], record["preflight"]) for record in preflight} == {("all_reduce", True)}
    assert {record["tier"] for record in preflight} == {"intra_node", "inter_node"}
    assert set(fabric_of(url, run["id"])) == {("intra_node", True), ("inter_node", True)}
