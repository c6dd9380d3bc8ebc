"""Series and points: repeats make one point with an interval, speed-up and efficiency under strong and weak scaling,
the point's flags, and the laws fitted per series."""

from __future__ import annotations

import pytest

from server.models import FlagCode
from server.services.comparison import compare_rows, scaling
from tests.factories import experiment_row
from tests.server.services.comparison.timed import codes, timed_run


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
