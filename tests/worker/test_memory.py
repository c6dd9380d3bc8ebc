"""What a rank holds, measured on the CPU as a GPU study would measure it: FSDP's saving must show."""

from __future__ import annotations

from typing import Any

import pytest

from contract.records import MEMORY_MEASURES, EpochRecord, MemoryRecord
from tests.worker.launch import WorkerRun, run_worker

pytestmark = pytest.mark.torch

# A gpt whose parameters dominate what a rank holds: 3.6 M parameters in 8 blocks (14 MB a copy, 43 MB of
# parameters, gradients and momentum under DDP) against a 0.5 MB data set and 2 sequences of 16 tokens a rank.
PARAMS_DOMINATE: dict[str, Any] = {
    "model": "gpt",
    "dataset": "synthetic",
    "width": 192,
    "depth": 8,
    "heads": 4,
    "context": 16,
    "global_batch_size": 4,
    "epochs": 1,
    "steps_per_epoch": 5,
}


@pytest.fixture(scope="module")
def held(tmp_path_factory) -> dict[str, WorkerRun]:
    tmp = tmp_path_factory.mktemp("held")
    runs = {strategy: run_worker(tmp, 2, strategy=strategy, **PARAMS_DOMINATE) for strategy in ("ddp", "fsdp")}
    for run in runs.values():
        assert run.returncode == 0, run.stderr[-3000:]
    return runs


def _largest(run: WorkerRun) -> MemoryRecord:
    """The rank that would run out first."""
    memories: list[MemoryRecord] = run.of_kind("memory")
    return max(memories, key=lambda memory: memory.peak_allocated_bytes)


def test_fsdp_holds_about_half_of_what_ddp_holds_per_rank_on_the_cpu(held):
    """Two ranks: FSDP keeps half the parameters, gradients and momentum of DDP on each (computed 0.50).

    Beyond its shard FSDP holds a few gathered blocks (the running one, the prefetched one, 1/8 of the model
    each) and reduce-scatter buffers while it runs; DDP holds a fourth copy of the parameters in its gradient
    buckets: measured 0.52-0.61 over five pairs of runs here (how many gathered blocks overlap at FSDP's peak,
    1.7 MB each, depends on when gloo's collectives finish). The resident set, the old measure, gives about 1.09
    for this model (0.84-1.23 in the issue): the ~690 MiB runtime floor drowns the state.
    """
    ddp, fsdp = _largest(held["ddp"]), _largest(held["fsdp"])
    assert (ddp.memory_kind, fsdp.memory_kind) == ("cpu_tensors", "cpu_tensors")
    ratio = fsdp.peak_allocated_bytes / ddp.peak_allocated_bytes
    assert 0.35 < ratio < 0.7, f"FSDP/DDP per rank {ratio:.2f}"
    (start,) = held["ddp"].of_kind("start")
    state = 3 * 4 * start.parameters  # fp32 parameters, gradients and momentum
    # DDP's tensors: its state, its gradient buckets (a third of it), and little more (activations, the data set).
    assert 4 / 3 * state < ddp.peak_allocated_bytes < 1.6 * state


def test_every_memory_figure_says_what_it_measures(held):
    for run in held.values():
        for memory in run.of_kind("memory"):
            assert memory.memory_kind in MEMORY_MEASURES
            # The resident set is kept beside it, labelled: it includes the runtime, so it is far larger.
            assert memory.peak_rss_bytes > memory.peak_allocated_bytes
        (epoch,) = run.of_kind("epoch")
        assert isinstance(epoch, EpochRecord)
        assert epoch.memory_kind == "cpu_tensors"
        assert epoch.peak_memory_bytes == max(memory.peak_allocated_bytes for memory in run.of_kind("memory"))
        assert epoch.peak_rss_bytes == max(memory.peak_rss_bytes for memory in run.of_kind("memory"))
