"""Every strategy trains the same model as one process would: losses step by step, on CPU with gloo."""

from __future__ import annotations

import socket
import subprocess
from typing import Any

import pytest

from contract.records import StepRecord
from tests.worker.launch import WorkerRun, parse_records, run_worker, worker_command

pytestmark = pytest.mark.torch

STEPS = 20
# Twenty optimizer steps, a loss record after each.
TWENTY_STEPS: dict[str, Any] = {"epochs": 1, "steps_per_epoch": STEPS, "step_log_every": 1, "global_batch_size": 32}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def losses(tmp_path, processes: int, **fields) -> list[float]:
    run = run_worker(tmp_path, processes, **{**TWENTY_STEPS, **fields})
    assert run.returncode == 0, run.stderr[-3000:]
    found = run.step_losses()
    assert len(found) == STEPS
    return found


def assert_same(actual: list[float], expected: list[float], rel: float = 1e-5) -> None:
    assert actual == pytest.approx(expected, rel=rel), list(zip(actual, expected, strict=True))


@pytest.fixture(scope="module")
def mlp_single(tmp_path_factory) -> list[float]:
    return losses(tmp_path_factory.mktemp("single"), 1, model="mlp", strategy="single")


@pytest.mark.parametrize("processes", [2, 4])
def test_ddp_matches_single(tmp_path, mlp_single, processes):
    assert_same(losses(tmp_path, processes, model="mlp", strategy="ddp"), mlp_single)


def test_fsdp_matches_ddp(tmp_path, mlp_single):
    assert_same(losses(tmp_path, 2, model="mlp", strategy="fsdp"), mlp_single)


def test_tp_matches_single(tmp_path, mlp_single):
    assert_same(losses(tmp_path, 2, model="mlp", strategy="tp"), mlp_single)


@pytest.mark.parametrize(("schedule", "microbatches"), [("gpipe", 4), ("1f1b", 4), ("gpipe", 1)])
def test_pp_matches_single(tmp_path, mlp_single, schedule, microbatches):
    """One microbatch is naive model parallelism: the stages take turns on the whole batch."""
    fields = {"pp_schedule": schedule, "microbatches": microbatches}
    assert_same(losses(tmp_path, 2, model="mlp", strategy="pp", **fields), mlp_single)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_gradient_accumulation_matches_one_big_step(tmp_path, mlp_single, strategy):
    # FSDP's gradients are reduced on the last microstep only: the sum of the unreduced ones must be the same step.
    assert_same(losses(tmp_path, 2, model="mlp", strategy=strategy, grad_accum_steps=2), mlp_single)


@pytest.fixture(scope="module")
def gpt_single(tmp_path_factory) -> list[float]:
    return losses(tmp_path_factory.mktemp("gpt"), 1, model="gpt", strategy="single", lr=0.01)


@pytest.mark.parametrize(
    ("processes", "fields"),
    [
        (2, {"strategy": "tp"}),
        (4, {"strategy": "fsdp_tp", "tp_degree": 2}),
        (2, {"strategy": "pp", "microbatches": 2}),
        (2, {"strategy": "fsdp"}),
    ],
)
def test_gpt_strategies_match_single(tmp_path, gpt_single, processes, fields):
    assert_same(losses(tmp_path, processes, model="gpt", lr=0.01, **fields), gpt_single, rel=1e-4)


def test_records_of_a_parallel_run(tmp_path):
    run: WorkerRun = run_worker(tmp_path, 2, model="mlp", strategy="fsdp", epochs=1, global_batch_size=32)
    assert run.returncode == 0, run.stderr[-3000:]
    (start,) = run.of_kind("start")
    assert start.parameters > 0 and start.world_size == 2
    assert sorted(memory.rank for memory in run.of_kind("memory")) == [0, 1]
    (epoch,) = run.of_kind("epoch")
    assert epoch.peak_memory_bytes == max(memory.peak_allocated_bytes for memory in run.of_kind("memory"))


def test_hybrid_fsdp_on_one_node_matches_single(tmp_path, mlp_single):
    assert_same(losses(tmp_path, 2, model="mlp", strategy="fsdp", fsdp_sharding="hybrid"), mlp_single)


def test_hybrid_fsdp_over_two_nodes_matches_single(tmp_path, mlp_single):
    """Two torchrun agents on this machine play two nodes: shards within each, replicas across them."""
    port = free_port()
    fields = {**TWENTY_STEPS, "model": "mlp", "strategy": "fsdp", "fsdp_sharding": "hybrid", "nodes": 2}
    command = worker_command(tmp_path / "hsdp", 4, **fields)
    agents = [
        subprocess.Popen(
            [
                *command[:3],
                "--nnodes=2",
                f"--node-rank={node}",
                "--nproc-per-node=2",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}",
                *command[5:],
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in range(2)
    ]
    outputs = [agent.communicate(timeout=300) for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], outputs[0][1][-2000:] + outputs[1][1][-2000:]
    records = parse_records(outputs[0][0] + outputs[1][0])
    (start,) = [record for record in records if record.kind == "start"]
    assert (start.world_size, start.nodes) == (4, 2)
    assert_same([record.train_loss for record in records if isinstance(record, StepRecord)], mlp_single)
