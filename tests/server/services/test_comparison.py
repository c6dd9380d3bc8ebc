"""Comparison rows and the scaling analysis: points over repeats, speed-up under strong and weak scaling, and the
flags that say which figures cannot be trusted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from contract.records import NodeHardware, WorkerRecord
from server.models import Experiment, FlagCode, Run, RunAccounting
from server.services.comparison import compare_csv, compare_rows, scaling
from tests.factories import epoch, experiment_row, printed_run, start


def timed_run(
    session: Session,
    experiment: Experiment,
    run_dir: Path,
    gpus: int,
    times: list[float],
    loss: float = 1.0,
    epoch_fields: dict[str, Any] | None = None,
    **spec_fields: Any,
) -> Run:
    """A completed run whose epochs took these times (the first is warm-up) and ended on `loss`."""
    records: list[WorkerRecord] = [
        start(),
        *(epoch(n, t, loss, **(epoch_fields or {})) for n, t in enumerate(times, 1)),
    ]
    fields = {"gpus": gpus, "epochs": len(times), "strategy": "ddp", **spec_fields}
    return printed_run(session, experiment, run_dir, records, **fields)


def codes(row) -> set[str]:
    return {flag.code for flag in row.flags}


def test_repeats_make_one_point_with_an_interval_and_speedup_from_the_means(session, tmp_path):
    experiment = experiment_row(session)
    for seed, (one, two) in enumerate([(10.0, 5.0), (11.0, 5.5), (9.0, 4.5)]):
        timed_run(session, experiment, tmp_path / f"1-{seed}", 1, [20, one, one, one], seed=seed)
        timed_run(session, experiment, tmp_path / f"2-{seed}", 2, [20, two, two, two], seed=seed)
    rows = compare_rows(session, experiment_ids=[experiment.id])
    assert len({row.series for row in rows}) == 1  # the seed tells repeats apart, not series
    two_gpus = [row for row in rows if row.gpus == 2]
    assert {row.point_n for row in rows} == {3}
    assert two_gpus[0].point_mean_s == pytest.approx(5.0)
    assert (two_gpus[0].point_ci_low_s or 5.0) < 5.0 < (two_gpus[0].point_ci_high_s or 5.0)
    assert two_gpus[0].speedup == pytest.approx(2.0)
    assert (two_gpus[0].speedup_ci_low or 2.0) < 2.0 < (two_gpus[0].speedup_ci_high or 2.0)
    assert all(row.baseline_gpus == 1 for row in rows)


def test_epoch_time_is_the_median_of_the_timed_epochs_with_its_spread(session, tmp_path):
    experiment = experiment_row(session)
    timed_run(session, experiment, tmp_path / "r", 1, [30.0, 2.0, 9.0, 3.0, 2.5])
    (row,) = compare_rows(session, experiment_ids=[experiment.id])
    assert (row.mean_epoch_time_s, row.epoch_time_min_s, row.epoch_time_max_s) == (2.75, 2.0, 9.0)
    assert row.timed_epochs == 4


def test_the_readme_example_as_it_went_wrong_is_flagged(session, tmp_path):
    """The issue's table: 3.50 s, 0.30 s, 1.09 s for 1, 2, 4 GPUs over two epochs: efficiency 5.77 at 2 GPUs."""
    experiment = experiment_row(session)
    for gpus, seconds in [(1, 3.5), (2, 0.30), (4, 1.09)]:
        timed_run(session, experiment, tmp_path / str(gpus), gpus, [5.0, seconds])
    rows = {row.gpus: row for row in compare_rows(session, experiment_ids=[experiment.id])}
    assert rows[2].efficiency == pytest.approx(3.5 / 0.3 / 2)
    assert FlagCode.superlinear in codes(rows[2])
    assert all(FlagCode.too_short in codes(row) for row in rows.values())
    superlinear = next(flag for flag in rows[2].flags if flag.code == FlagCode.superlinear)
    assert superlinear.severity == "warning" and "isolation exclusive" in superlinear.message


def test_long_enough_quiet_runs_raise_no_flag(session, tmp_path):
    experiment = experiment_row(session)
    for gpus in (1, 2, 4):
        timed_run(session, experiment, tmp_path / str(gpus), gpus, [8.0 / gpus + 1] + [8.0 / gpus] * 3)
    rows = compare_rows(session, experiment_ids=[experiment.id])
    assert [row.flags for row in rows] == [[], [], []]
    assert [row.efficiency for row in rows] == pytest.approx([1.0, 1.0, 1.0])


def test_a_point_whose_interval_reaches_its_neighbour_is_noisy(session, tmp_path):
    experiment = experiment_row(session)
    for seed, (one, two) in enumerate([(10.0, 6.0), (10.2, 12.0), (9.8, 9.0)]):
        timed_run(session, experiment, tmp_path / f"1-{seed}", 1, [20] + [one] * 3, seed=seed)
        timed_run(session, experiment, tmp_path / f"2-{seed}", 2, [20] + [two] * 3, seed=seed)
    rows = compare_rows(session, experiment_ids=[experiment.id])
    assert all(FlagCode.noisy in codes(row) for row in rows if row.gpus == 2)


def test_warm_up_dominated_and_incomplete_runs_are_flagged(session, tmp_path):
    experiment = experiment_row(session)
    warm = timed_run(session, experiment, tmp_path / "w", 1, [60.0, 2.0, 2.0, 2.0])
    cut = timed_run(session, experiment, tmp_path / "c", 2, [3.0, 2.0, 2.0, 2.0], epochs=6)
    rows = {row.run_id: row for row in compare_rows(session, experiment_ids=[experiment.id])}
    assert FlagCode.warmup_dominated in codes(rows[warm.id])
    incomplete = next(flag for flag in rows[cut.id].flags if flag.code == FlagCode.incomplete)
    assert incomplete.severity == "warning" and "4 of 6 epochs" in incomplete.message


def test_strategies_that_should_agree_on_the_loss_and_do_not_are_flagged(session, tmp_path):
    """The first epoch's loss is compared: rounding drifts later epochs apart even where the layouts agree."""
    experiment = experiment_row(session)

    def losses_run(name: str, first: float, last: float, **fields: Any) -> Run:
        records: list[WorkerRecord] = [start(), *(epoch(n, 2.0, first) for n in (1, 2, 3)), epoch(4, 2.0, last)]
        return printed_run(session, experiment, tmp_path / name, records, gpus=2, epochs=4, **fields)

    ddp = losses_run("d", 0.5, 0.05)
    drifted = losses_run("f", 0.5 * (1 + 1e-7), 0.0503, strategy="fsdp")
    off = losses_run("t", 0.6, 0.05, strategy="tp")
    other_seed = losses_run("s", 0.9, 0.05, strategy="pp", seed=7)
    rows = {row.run_id: row for row in compare_rows(session, experiment_ids=[experiment.id])}
    assert FlagCode.loss_mismatch in codes(rows[off.id])
    flagged = {run_id for run_id, row in rows.items() if FlagCode.loss_mismatch in codes(row)}
    assert not {ddp.id, drifted.id, other_seed.id} & flagged


def test_a_slow_rank_is_a_straggler(session, tmp_path):
    experiment = experiment_row(session)
    steps = {"step_time_s": 0.1, "step_time_fastest_s": 0.08, "step_time_slowest_s": 0.13}
    run = timed_run(session, experiment, tmp_path / "s", 2, [3.0, 2.0, 2.0, 2.0], epoch_fields=steps)
    (row,) = compare_rows(session, run_ids=[run.id])
    assert FlagCode.straggler in codes(row)
    assert row.step_time_s == 0.1


def test_weak_scaling_compares_time_per_step(session, tmp_path):
    """Weak: the batch per GPU is fixed; efficiency = time per step at the smallest count / time per step at N."""
    experiment = experiment_row(session, request={"name": "weak", "scaling": "weak"})
    # 640 samples per epoch: 10 steps of 64 on 1 GPU, 5 of 128 on 2 GPUs taking 1.25x as long per step.
    for gpus, step_s in [(1, 0.4), (2, 0.5)]:
        batch = 64 * gpus
        samples_per_s = batch / step_s
        times = [5.0] + [640 / samples_per_s] * 3
        timed_run(
            session, experiment, tmp_path / str(gpus), gpus, times,
            epoch_fields={"samples_per_s": samples_per_s}, global_batch_size=batch,
        )  # fmt: skip
    rows = {row.gpus: row for row in compare_rows(session, experiment_ids=[experiment.id])}
    assert rows[1].series == rows[2].series  # the growing batch does not split the series
    assert rows[2].scaling == "weak"
    assert rows[2].step_time_s == pytest.approx(0.5)
    assert rows[2].efficiency == pytest.approx(0.4 / 0.5)
    assert rows[2].speedup == pytest.approx(2 * 0.4 / 0.5)


def test_scaling_fits_a_series_with_three_counts_and_refuses_two(session, tmp_path):
    experiment = experiment_row(session)
    serial = 0.1
    for gpus in (1, 2, 4, 8):
        seconds = 10.0 * (serial + (1 - serial) / gpus)
        timed_run(session, experiment, tmp_path / str(gpus), gpus, [seconds * 2] + [seconds] * 3)
    for gpus in (1, 2):
        timed_run(session, experiment, tmp_path / f"f{gpus}", gpus, [20.0] + [10.0 / gpus] * 3, strategy="fsdp")
    result = scaling(compare_rows(session, experiment_ids=[experiment.id]), experiment.id)
    ddp, fsdp = result.series
    amdahl = ddp.fits.amdahl
    assert amdahl is not None
    assert amdahl.serial_fraction == pytest.approx(serial, rel=0.01)
    assert amdahl.r2 == pytest.approx(1.0)
    assert max(point.gpus for point in ddp.predicted) == 32
    assert "GPUs" in ddp.recommendation
    assert fsdp.fits.refused is not None and "3 distinct GPU counts" in fsdp.fits.refused
    assert fsdp.predicted == []


def test_csv_carries_flags_intervals_and_n(session, tmp_path):
    experiment = experiment_row(session)
    timed_run(session, experiment, tmp_path / "1", 1, [5.0, 3.5])
    timed_run(session, experiment, tmp_path / "2", 2, [5.0, 0.3])
    text = compare_csv(compare_rows(session, experiment_ids=[experiment.id]))
    header = text.splitlines()[0].split(",")
    assert {"flags", "point_mean_s", "point_ci_low_s", "point_ci_high_s", "point_n"} <= set(header)
    assert "superlinear: efficiency" in text


def test_slurms_figures_become_resources_and_a_shared_node_flag(session, tmp_path):
    experiment = experiment_row(session)
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
    assert "41, 42" in shared.message


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
