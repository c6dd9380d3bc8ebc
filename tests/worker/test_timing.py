"""Where a step's time goes: the interval arithmetic, and real 2-process runs of every strategy on CPU."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from contract.records import EpochRecord, TimingRecord
from tests.worker.launch import run_worker
from worker.timing import COMPUTE_MARK, StepTimes, intersect, union, waited_and_hidden

pytestmark = pytest.mark.torch


def event(name: str, start: float, end: float, thread: int = 1) -> SimpleNamespace:
    return SimpleNamespace(name=name, thread=thread, time_range=SimpleNamespace(start=start, end=end))


def test_union_merges_overlaps_and_intersect_keeps_the_shared_time():
    assert union([(5, 7), (0, 2), (1, 3), (7, 8)]) == [(0, 3), (5, 8)]
    assert intersect([(0, 3), (5, 8)], [(2, 6), (7, 9)]) == [(2, 3), (5, 6), (7, 8)]


def test_communication_is_waited_for_where_nothing_computes():
    events = [
        event(COMPUTE_MARK, 0, 100),
        event("aten::mm", 0, 30),
        event("aten::mm", 60, 100),
        event("gloo:all_reduce", 20, 70, thread=2),  # 10 under compute, 30 waited for, 10 under compute
        event("gloo:all_reduce", 150, 200, thread=2),  # outside forward and backward: not this part's
        event("aten::add", 40, 50, thread=3),  # another thread's operator is not this rank's compute
    ]
    waited, hidden = waited_and_hidden(events, on_gpu=False)
    assert (waited, hidden) == pytest.approx((0.3, 0.2))


def test_no_profile_no_communication():
    assert waited_and_hidden([], on_gpu=False) == (0.0, 0.0)


def test_step_times_cross_a_collective_as_numbers():
    times = StepTimes(20, 0.01, 0.001, 0.005, 0.002, 0.002, None)
    assert StepTimes.from_list(times.to_list()) == times
    assert sum(times.breakdown().values()) == pytest.approx(times.step_s)


FIELDS: dict[str, Any] = {"model": "mlp", "epochs": 1, "steps_per_epoch": 20, "global_batch_size": 128}


@pytest.mark.parametrize(("strategy", "processes"), [("ddp", 2), ("fsdp", 2), ("tp", 2), ("pp", 2), ("single", 1)])
def test_step_parts_make_the_step_and_the_steps_make_the_epoch(tmp_path, strategy, processes):
    run = run_worker(tmp_path, processes, strategy=strategy, **FIELDS)
    assert run.returncode == 0, run.stderr[-3000:]
    (epoch,) = [r for r in run.records if isinstance(r, EpochRecord)]
    timings = [r for r in run.records if isinstance(r, TimingRecord)]
    assert sorted(t.rank for t in timings) == list(range(processes))
    assert all(t.steps == 20 and t.method for t in timings)
    for timing in timings:
        parts = timing.data_s + timing.compute_s + timing.optimizer_s + timing.comm_s
        assert parts == pytest.approx(timing.step_s, rel=0.1), timing
        assert min(timing.data_s, timing.compute_s, timing.optimizer_s, timing.comm_s) >= 0
    assert epoch.step_time_s is not None and epoch.time_breakdown is not None
    assert sum(epoch.time_breakdown.values()) == pytest.approx(epoch.step_time_s, rel=0.1)
    assert set(epoch.time_breakdown) == {"data", "compute", "optimizer", "comm"}
    # Rank 0's steps lie inside rank 0's epoch, on the same clock: that holds on any machine. How large a share of the
    # epoch they take is a timing, not a property: what is left (the sampler, the profiler's start and stop, the
    # closing barrier) is a few milliseconds alone, but a pipeline's 20 steps of 6 ms were 49 % of the epoch in CI,
    # with other tests beside it. Bounds on that share were loosened twice and still failed, so none is asserted.
    (first,) = [t for t in timings if t.rank == 0]
    assert 0 < first.step_s * first.steps <= epoch.epoch_time_s
    fastest, slowest = epoch.step_time_fastest_s, epoch.step_time_slowest_s
    assert fastest is not None and slowest is not None
    assert fastest <= epoch.step_time_s <= slowest
    assert (fastest, slowest) == (min(t.step_s for t in timings), max(t.step_s for t in timings))
    if processes == 1:
        assert all(t.comm_overlapped_s is None for t in timings)
    else:
        # Two processes exchange something in every strategy's forward and backward.
        assert all(t.comm_overlapped_s is not None for t in timings)
        # Waited for or hidden under compute: which depends on the load of the machine's cores at the time.
        assert sum(t.comm_s + (t.comm_overlapped_s or 0.0) for t in timings) > 0
