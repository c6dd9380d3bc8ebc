"""Series and points: repeats make one point with an interval, speed-up and efficiency under strong and weak scaling,
the point's flags, its medians of the figures given per run, and the laws fitted per series."""

from __future__ import annotations

from typing import Any

import pytest

from contract.records import LaunchRecord, WorkerRecord, format_record
from contract.spec import Strategy
from contract.states import RunState
from server.models import CompareRow, FlagCode, RunResources
from server.services.comparison import compare_rows, scaling
from server.services.comparison.series import by_run_time, gathered, nothing_timed, point_medians
from server.services.ingestion.parsing import ingest
from tests.factories import epoch, experiment_row, printed_run, run_row, spec, start
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


def test_a_learning_rate_rule_scales_the_rate_within_its_series_and_tells_the_rules_apart(session, tmp_path):
    """A rule gives each GPU count of a weak series its own rate, as the batch is its own: one series per rule."""
    experiment = experiment_row(session, request={"name": "weak", "scaling": "weak"})
    for rule, factor in (("linear", 1.0), ("sqrt", 0.5**0.5)):
        for gpus in (1, 2):
            batch, lr = 32 * gpus, 0.05 * (gpus if rule == "linear" else gpus**0.5)
            fields: dict[str, Any] = {"lr_scaling": rule, "lr": lr, "reference_lr": 0.05, "reference_batch": 32}
            timed_run(
                session, experiment, tmp_path / f"{rule}{gpus}", gpus, [2.0] + [1.0 * factor] * 3,
                epoch_fields={"samples_per_s": 320 / factor}, global_batch_size=batch, **fields,
            )  # fmt: skip
    rows = compare_rows(session, experiment_ids=[experiment.id])
    assert sorted({row.series for row in rows}) == ["ddp, lr_scaling=linear", "ddp, lr_scaling=sqrt"]
    assert all(row.point_n == 1 and row.baseline_gpus == 1 for row in rows)


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


def _row(run_id: str, gpus: int = 1, **fields: Any) -> CompareRow:
    """A compared run with no figures but those a test gives."""
    values: dict[str, Any] = {
        "run_id": run_id,
        "state": RunState.completed,
        "strategy": Strategy.ddp,
        "gpus": gpus,
        "nodes": 1,
        "global_batch_size": 64,
        "epochs_done": 3,
        "mean_epoch_time_s": None,
        "speedup": None,
        "efficiency": None,
        "final_train_loss": None,
        "final_val_loss": None,
        "final_val_accuracy": None,
        "samples_per_s": None,
        "peak_memory_bytes": None,
        "experiment_id": "e",
        "series": "ddp",
        "ingest_done": True,
    }
    return CompareRow.model_validate(values | fields)


def _resources(**fields: Any) -> RunResources:
    return RunResources.model_validate({"device_hours_per_epoch": 0.1, "energy_per_sample_j": 2.0} | fields)


def test_a_points_breakdown_is_each_parts_median_over_the_runs_that_have_one():
    medians = point_medians(
        [
            _row("a", time_breakdown={"data": 1.0, "compute": 4.0, "optimizer": 1.0, "comm": 1.0}),
            _row("b", time_breakdown={"data": 3.0, "compute": 5.0, "optimizer": 1.0}),
            _row("c"),
        ]
    )
    assert medians.time_breakdown == {"data": 2.0, "compute": 4.5, "optimizer": 1.0, "comm": 1.0}
    assert medians.time_breakdown_n == 2
    # An empty breakdown is still one (the dashboard counted it), with no part.
    assert point_medians([_row("a", time_breakdown={})]).time_breakdown_n == 1
    assert point_medians([_row("a")]).time_breakdown == {}


def test_a_points_accounting_figures_leave_out_runs_without_accounting_or_whose_cluster_does_not_gather_them():
    no_energy = _resources(device_hours_per_epoch=0.3, energy_per_sample_j=5.0, not_gathered=["energy"])
    medians = point_medians(
        [
            _row("a", resources=_resources(device_hours_per_epoch=0.1, energy_per_sample_j=1.0)),
            _row("b", resources=no_energy),
            _row("c", resources=_resources(device_hours_per_epoch=0.2, energy_per_sample_j=None)),
            _row("d"),
        ]
    )
    assert medians.device_hours_per_epoch == pytest.approx(0.2)
    assert medians.energy_per_sample_j == pytest.approx(1.0)
    assert point_medians([_row("a")]).energy_per_sample_j is None


def test_a_figure_is_gathered_unless_named_bare_or_not_and_energy_per_sample_needs_the_energy():
    assert gathered(_resources(), "energy_per_sample_j")
    assert not gathered(_resources(not_gathered=["energy_j"]), "energy_j")
    assert not gathered(_resources(not_gathered=["energy"]), "energy_j")
    assert not gathered(_resources(not_gathered=["energy_j"]), "energy_per_sample_j")
    assert not gathered(_resources(not_gathered=["max_rss"]), "max_rss_bytes")
    assert gathered(_resources(not_gathered=["energy_j"]), "device_hours_per_epoch")


def test_a_points_standard_figures_and_own_metrics_are_medians_over_the_runs_that_have_them():
    medians = point_medians(
        [
            _row("a", final_train_loss=0.5, mean_epoch_time_s=10.0, metrics={"grad_norm": 1.0, "alpha": 3.0}),
            _row("b", final_train_loss=0.7, mean_epoch_time_s=12.0, metrics={"grad_norm": 2.0}),
            _row("c", final_train_loss=float("nan"), samples_per_s=100.0),
        ]
    )
    assert medians.final_train_loss == pytest.approx(0.6)  # NaN is no figure
    assert medians.mean_epoch_time_s == pytest.approx(11.0)
    assert medians.samples_per_s == pytest.approx(100.0)
    assert medians.final_val_loss is None
    assert medians.metrics == {"alpha": 3.0, "grad_norm": 1.5}


def test_scaling_gives_each_point_its_runs_and_their_medians(session, tmp_path):
    experiment = experiment_row(session)
    runs = [
        timed_run(session, experiment, tmp_path / f"1-{seed}", 1, [20.0, 10.0, 10.0], loss=loss, seed=seed)
        for seed, loss in enumerate([1.0, 2.0])
    ]
    two = timed_run(session, experiment, tmp_path / "2", 2, [20.0, 5.0, 5.0], loss=4.0)
    [series] = scaling(compare_rows(session, experiment_ids=[experiment.id])).series
    one_gpu, two_gpus = series.points
    assert sorted(one_gpu.run_ids) == sorted(run.id for run in runs) and two_gpus.run_ids == [two.id]
    assert one_gpu.medians.final_train_loss == pytest.approx(1.5)
    assert one_gpu.medians.mean_epoch_time_s == pytest.approx(10.0)
    assert two_gpus.medians.final_train_loss == pytest.approx(4.0)


# ---- the measure: epoch time where every run timed its epochs, else run time --------------------------------------

T0 = 1_764_000_000.0


def _launched(seconds: float, status: int = 0) -> list[WorkerRecord]:
    """A launch's records as the batch script prints them, `seconds` apart."""
    return [LaunchRecord(event="start", at=T0), LaunchRecord(event="end", at=T0 + seconds, exit_status=status)]


def test_the_measure_is_run_time_only_where_a_run_has_a_run_time_and_no_epoch_time():
    assert not by_run_time([(5.0, 12.0), (2.6, 7.0)])  # every run timed its epochs: epoch time
    assert not by_run_time([(5.0, 12.0), (None, None)])  # a run with neither (failed, live) changes nothing
    assert by_run_time([(None, 12.0), (None, 7.0)])  # a program that prints no epoch
    assert by_run_time([(5.0, 12.0), (None, 7.0)])  # one series, one measure: run time for all


def test_runs_that_print_no_epoch_are_measured_by_their_run_time(session, tmp_path):
    experiment = experiment_row(session)
    for gpus, seconds in [(1, 12.0), (2, 8.0)]:
        printed_run(session, experiment, tmp_path / str(gpus), [start(), *_launched(seconds)], gpus=gpus, epochs=2)
    rows = {row.gpus: row for row in compare_rows(session, experiment_ids=[experiment.id])}
    assert rows[1].run_time_s == pytest.approx(12.0) and rows[2].run_time_s == pytest.approx(8.0)
    assert {row.measure for row in rows.values()} == {"run_time_s"}
    assert rows[2].speedup == pytest.approx(1.5) and rows[2].efficiency == pytest.approx(0.75)
    [series] = scaling(rows.values()).series
    assert series.measure == "run_time_s" and series.points[1].speedup == pytest.approx(1.5)


def test_runs_that_timed_their_epochs_stay_measured_by_epoch_time_beside_their_run_time(session, tmp_path):
    experiment = experiment_row(session)
    for gpus, seconds in [(1, 4.0), (2, 2.0)]:
        records: list[WorkerRecord] = [start(), *(epoch(n, seconds) for n in (1, 2, 3)), *_launched(30.0)]
        printed_run(session, experiment, tmp_path / str(gpus), records, gpus=gpus, epochs=3)
    # A run that failed before its first epoch has a run time (its failure's), which does not change the measure.
    failed = tmp_path / "failed"
    failed.mkdir()
    failing: list[WorkerRecord] = [start(), *_launched(1.0, 1)]
    (failed / "output.log").write_text("".join(format_record(record) + "\n" for record in failing))
    run = run_row(session, experiment, failed, run_spec=spec(gpus=4, epochs=3), state=RunState.failed)
    ingest(session, run)
    run.ingest_done = True
    session.commit()
    rows = {row.gpus: row for row in compare_rows(session, experiment_ids=[experiment.id])}
    assert rows[4].run_time_s == pytest.approx(1.0) and rows[4].measure is None and rows[4].speedup is None
    assert (rows[1].measure, rows[2].measure) == ("epoch_time_s", "epoch_time_s")
    assert rows[2].speedup == pytest.approx(2.0)
    assert rows[1].run_time_s == pytest.approx(30.0)
    assert scaling(rows.values()).series[0].measure == "epoch_time_s"


def test_a_series_without_points_says_timed_runs_are_to_come_only_while_runs_are_live():
    assert nothing_timed([_row("a", ingest_done=False, state=RunState.running)]).startswith("No timed runs yet")
    failed = nothing_timed([_row("a", state=RunState.failed), _row("b", state=RunState.timeout)])
    assert "No run of this series completed (failed, timeout)" in failed
    silent = nothing_timed([_row("a")])
    assert "printed an epoch line, and none has a run time" in silent and "yet" not in silent
