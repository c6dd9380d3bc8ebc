"""Each run's measure: its median epoch and spread, step time, Slurm's figures, peak memory, and the flags it raises
on its own, as a comparison reads them from the database."""

from __future__ import annotations

from typing import Any

import pytest

from contract.records import NodeHardware, WorkerRecord
from server.models import FlagCode, RunAccounting
from server.services.comparison import compare_csv, compare_rows
from tests.factories import epoch, experiment_row, printed_run, start
from tests.server.services.comparison.timed import codes, timed_run


def test_epoch_time_is_the_median_of_the_timed_epochs_with_its_spread(session, tmp_path):
    experiment = experiment_row(session)
    timed_run(session, experiment, tmp_path / "r", 1, [30.0, 2.0, 9.0, 3.0, 2.5])
    (row,) = compare_rows(session, experiment_ids=[experiment.id])
    assert (row.mean_epoch_time_s, row.epoch_time_min_s, row.epoch_time_max_s) == (2.75, 2.0, 9.0)
    assert row.timed_epochs == 4


def test_warm_up_dominated_and_incomplete_runs_are_flagged(session, tmp_path):
    experiment = experiment_row(session)
    warm = timed_run(session, experiment, tmp_path / "w", 1, [60.0, 2.0, 2.0, 2.0])
    cut = timed_run(session, experiment, tmp_path / "c", 2, [3.0, 2.0, 2.0, 2.0], epochs=6)
    rows = {row.run_id: row for row in compare_rows(session, experiment_ids=[experiment.id])}
    assert FlagCode.warmup_dominated in codes(rows[warm.id])
    incomplete = next(flag for flag in rows[cut.id].flags if flag.code == FlagCode.incomplete)
    assert incomplete.severity == "warning" and "4 of 6 epochs" in incomplete.message


def test_a_slow_rank_is_a_straggler(session, tmp_path):
    experiment = experiment_row(session)
    steps = {"step_time_s": 0.1, "step_time_fastest_s": 0.08, "step_time_slowest_s": 0.13}
    run = timed_run(session, experiment, tmp_path / "s", 2, [3.0, 2.0, 2.0, 2.0], epoch_fields=steps)
    (row,) = compare_rows(session, run_ids=[run.id])
    assert FlagCode.straggler in codes(row)
    assert row.step_time_s == 0.1


@pytest.mark.parametrize(
    ("isolation", "advice"),
    [
        ("shared", "Run the experiment with isolation exclusive"),
        (None, "asked for isolation exclusive, and other jobs still shared"),  # a training's default
        ("exclusive", "asked for isolation exclusive, and other jobs still shared"),
    ],
)
def test_slurms_figures_become_resources_and_a_shared_node_flag(session, tmp_path, isolation, advice):
    experiment = experiment_row(session, request={"name": "exp", "isolation": isolation, "base": {"model": "mlp"}})
    run = timed_run(session, experiment, tmp_path / "r", 2, [3.0, 2.0, 2.0, 2.0], epoch_fields={"samples_per_s": 32.0})
    session.add(
        RunAccounting(
            run_id=run.id, job_id="7", elapsed_s=36, alloc_cpus=2, cpu_efficiency=0.9, max_rss_bytes=2**30,
            shared_with=["41", "42"], not_gathered=["gpu_util", "gpu_mem_bytes", "energy_j"],
        )
    )  # fmt: skip
    session.commit()
    (row,) = compare_rows(session, run_ids=[run.id])
    resources = row.resources
    assert resources is not None
    # 36 s on 2 CPUs over 4 epochs: 0.005 CPU-hours per epoch.
    assert resources.device_kind == "cpu"
    assert resources.device_hours_per_epoch == pytest.approx(0.005)
    assert {"gpu_utilization", "energy_j", "energy_per_sample_j"} <= set(resources.not_gathered)
    shared = next(flag for flag in row.flags if flag.code == FlagCode.shared_node)
    assert "41, 42" in shared.message and advice in shared.message
    assert ("with isolation exclusive" in shared.message) is (isolation == "shared")


@pytest.mark.parametrize(("ranks", "threads", "flagged"), [([0, 1, 2, 3], 1, True), ([0, 1], 1, False)])
def test_more_processes_x_threads_than_cpus_given_is_oversubscribed(session, tmp_path, ranks, threads, flagged):
    experiment = experiment_row(session)
    node = NodeHardware(
        host="n1", ranks=ranks, physical_cores=2, hardware_threads=2, cpus_given=2, affinity="0-1",
        intra_op_threads=threads,
    )  # fmt: skip
    begun = start().model_copy(update={"nodes_hardware": [node], "world_size": len(ranks)})
    records: list[WorkerRecord] = [begun, *(epoch(n, 2.0) for n in range(1, 5))]
    run = printed_run(session, experiment, tmp_path / "r", records, gpus=len(ranks), epochs=4)
    (row,) = compare_rows(session, run_ids=[run.id])
    assert (FlagCode.oversubscribed in codes(row)) is flagged
    if flagged:
        message = next(flag.message for flag in row.flags if flag.code == FlagCode.oversubscribed)
        assert "4 processes x 1 threads on 2 CPUs" in message and "contention, not scaling" in message


def test_a_programs_own_start_record_keeps_the_hardware_its_batch_script_measured(session, tmp_path):
    """The batch script's start record carries the node's hardware; the program's own, printed after it, knows its
    device and torch but not its cores: the run stays flagged for what the script measured."""
    experiment = experiment_row(session)
    node = NodeHardware(
        host="n1", ranks=[0, 1, 2, 3], physical_cores=2, hardware_threads=2, cpus_given=2, affinity="0-1",
        intra_op_threads=1, cpus_allocated=4,
    )  # fmt: skip
    script = start().model_copy(update={"nodes_hardware": [node], "world_size": 4, "device": None})
    own = start().model_copy(update={"world_size": 4, "torch_version": "2.5"})
    records: list[WorkerRecord] = [script, own, *(epoch(n, 2.0) for n in range(1, 5))]
    run = printed_run(session, experiment, tmp_path / "r", records, gpus=4, epochs=4)
    (row,) = compare_rows(session, run_ids=[run.id])
    assert FlagCode.oversubscribed in codes(row)


@pytest.mark.parametrize(("efficiency", "flagged"), [(1.32, True), (1.05, False), (0.5, False), (None, False)])
def test_a_run_that_used_more_cpus_than_allocated_is_flagged(session, tmp_path, efficiency, flagged):
    experiment = experiment_row(session)
    run = timed_run(session, experiment, tmp_path / "r", 1, [3.0, 2.0, 2.0, 2.0])
    session.add(RunAccounting(run_id=run.id, job_id="7", elapsed_s=36, alloc_cpus=1, cpu_efficiency=efficiency))
    session.commit()
    (row,) = compare_rows(session, run_ids=[run.id])
    assert (FlagCode.cpus_beyond_allocation in codes(row)) is flagged


def test_each_runs_peak_memory_says_what_it_measures(session, tmp_path):
    """A CPU run's chart figure is what its tensors held; its resident set comes beside it, labelled; a run printed
    before the labels (the resident set as its only figure) still says which measure its figure is."""
    experiment = experiment_row(session)
    held: dict[str, Any] = {
        "peak_memory_bytes": 40 * 2**20,
        "memory_kind": "cpu_tensors",
        "peak_rss_bytes": 900 * 2**20,
    }
    tensors = printed_run(session, experiment, tmp_path / "t", [start(), epoch(1, 2.0, **held)], gpus=2)
    old: dict[str, Any] = {"peak_memory_bytes": 850 * 2**20, "memory_kind": "cpu_max_rss"}
    rss = printed_run(session, experiment, tmp_path / "r", [start(), epoch(1, 2.0, **old)], seed=1)
    gpu: dict[str, Any] = {"peak_memory_bytes": 2**30, "memory_kind": "cuda"}  # a worker before the labels said "cuda"
    cuda = printed_run(session, experiment, tmp_path / "c", [start(), epoch(1, 2.0, **gpu)], seed=2)
    rows = {row.run_id: row for row in compare_rows(session, experiment_ids=[experiment.id])}
    assert (rows[tensors.id].peak_memory_bytes, rows[tensors.id].memory_kind) == (40 * 2**20, "cpu_tensors")
    assert rows[tensors.id].peak_rss_bytes == 900 * 2**20
    assert (rows[rss.id].memory_kind, rows[rss.id].peak_rss_bytes) == ("cpu_max_rss", None)
    words = {run.id: str(rows[run.id].memory_measure) for run in (tensors, rss, cuda)}
    assert words[tensors.id].startswith("CPU tensors") and words[rss.id].startswith("CPU max RSS")
    assert words[cuda.id].startswith("CUDA allocated")
    assert "memory_kind" in compare_csv(list(rows.values())).splitlines()[0]
