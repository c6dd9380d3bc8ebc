"""Time to target in the comparison: each run's figures on its row, each point's MLPerf score with the effective
speed-up beside the throughput speed-up and the statistical efficiency, the convergence flags, a run stopped at its
target counted complete, and the series' answer in words, hedged where it rests on flagged figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from contract.records import ResumeRecord, WorkerRecord, format_record
from contract.rundir import OUTPUT_FILE
from contract.spec import RunSpec
from contract.states import RunState
from server.models import CompareRow, Experiment, FlagCode, Run
from server.services.comparison import compare_csv, compare_rows, scaling
from server.services.ingestion.parsing import ingest
from tests.factories import epoch, experiment_row, printed_run, run_row, start
from tests.server.services.comparison.timed import codes

TARGET = {"metric": "val_accuracy", "at_least": 0.9}
# Epochs long enough to time without a too_short flag.
SECONDS = 2.0


def target_run(
    session: Session,
    experiment: Experiment,
    run_dir: Path,
    gpus: int,
    accuracies: list[float],
    seconds: float = SECONDS,
    **spec_fields: Any,
) -> Run:
    """A completed run with the target whose epochs reached these accuracies, each taking `seconds` (the first
    one more, as warm-up), ten steps of its global batch (weak scaling compares time per step)."""
    batch = spec_fields.get("global_batch_size", 64)
    records: list[WorkerRecord] = [
        start(),
        *(
            epoch(n, seconds + (1 if n == 1 else 0), val_accuracy=a, samples_per_s=batch * 10 / seconds)
            for n, a in enumerate(accuracies, 1)
        ),
    ]
    fields = {"gpus": gpus, "epochs": len(accuracies), "strategy": "ddp", "target": TARGET, **spec_fields}
    return printed_run(session, experiment, run_dir, records, **fields)


def by_gpus(rows: list[CompareRow]) -> dict[int, list[CompareRow]]:
    found: dict[int, list[CompareRow]] = {}
    for row in rows:
        found.setdefault(row.gpus, []).append(row)
    return found


def weak(session: Session) -> Experiment:
    return experiment_row(session, request={"name": "weak", "scaling": "weak"})


def test_a_run_reports_when_it_reached_the_target_and_its_training_time_to_it(session, tmp_path):
    experiment = experiment_row(session)
    target_run(session, experiment, tmp_path / "1", 1, [0.5, 0.8, 0.92, 0.95])
    (row,) = compare_rows(session, experiment_ids=[experiment.id])
    assert (row.target_reached, row.epochs_to_target, row.stopped_at_target) == (True, 3, False)
    assert row.time_to_target_s == pytest.approx(3.0 + 2.0 + 2.0)
    assert row.target is not None and row.target.describe() == "val_accuracy >= 0.9"
    assert row.effective_speedup == pytest.approx(1.0) and row.statistical_efficiency == pytest.approx(1.0)


def test_without_a_target_nothing_changes(session, tmp_path):
    experiment = experiment_row(session)
    printed_run(session, experiment, tmp_path / "1", [start(), epoch(1, 3.0), epoch(2, 2.0)], gpus=1, epochs=2)
    rows = compare_rows(session, experiment_ids=[experiment.id])
    assert (rows[0].target_reached, rows[0].epochs_to_target, rows[0].target) == (None, None, None)
    assert scaling(rows).series[0].time_to_target is None


def test_a_run_that_ended_without_reaching_is_flagged_and_counted(session, tmp_path):
    experiment = experiment_row(session)
    target_run(session, experiment, tmp_path / "1", 1, [0.5, 0.8, 0.85, 0.88])
    (row,) = compare_rows(session, experiment_ids=[experiment.id])
    assert (row.target_reached, row.epochs_to_target, row.time_to_target_s) == (False, None, None)
    flag = next(flag for flag in row.flags if flag.code == FlagCode.target_not_reached)
    assert "0.88 at epoch 4" in flag.message and "more epochs" in flag.message
    series = scaling([row]).series[0]
    assert series.time_to_target is not None
    point = series.time_to_target.points[0]
    assert (point.runs, point.reached, point.not_reached, point.scoring) == (1, 0, 1, None)
    assert [flag.code for flag in point.flags] == [FlagCode.target_not_reached]
    assert "no run reached" in series.time_to_target.summary


def test_the_effective_epochs_after_a_resume_count(session, tmp_path):
    """Epochs 3 and 4 of the first attempt are superseded by the resume from epoch 2's checkpoint: the target is
    reached at the effective epoch 4, and the time counts the epochs that count, not the lost ones."""
    experiment = experiment_row(session)
    records: list[WorkerRecord] = [
        start(),
        epoch(1, 3.0, val_accuracy=0.5),
        epoch(2, 2.0, val_accuracy=0.7),
        epoch(3, 50.0, val_accuracy=0.95),  # lost with the job: never checkpointed
        start(),
        ResumeRecord(epoch=2),
        epoch(3, 2.5, val_accuracy=0.85),
        epoch(4, 2.5, val_accuracy=0.91),
    ]
    printed_run(session, experiment, tmp_path / "1", records, gpus=1, epochs=4, target=TARGET)
    (row,) = compare_rows(session, experiment_ids=[experiment.id])
    assert (row.target_reached, row.epochs_to_target) == (True, 4)
    assert row.time_to_target_s == pytest.approx(3.0 + 2.0 + 2.5 + 2.5)


def test_a_series_needing_more_epochs_at_a_larger_batch_is_flagged_slower_convergence(session, tmp_path):
    experiment = weak(session)
    target_run(session, experiment, tmp_path / "1", 1, [0.5, 0.92, 0.95, 0.96], global_batch_size=64)
    target_run(session, experiment, tmp_path / "2", 2, [0.4, 0.6, 0.8, 0.91], global_batch_size=128, seconds=2.5)
    rows = by_gpus(compare_rows(session, experiment_ids=[experiment.id]))
    assert len({row.series for group in rows.values() for row in group}) == 1
    (one,), (two,) = rows[1], rows[2]
    assert FlagCode.slower_convergence in codes(two) and FlagCode.slower_convergence not in codes(one)
    flag = next(flag for flag in two.flags if flag.code == FlagCode.slower_convergence)
    assert "noise of repeats is unknown" in flag.message
    assert two.statistical_efficiency == pytest.approx(2 / 4)
    assert two.effective_speedup == pytest.approx((3 + 2) / (3.5 + 2.5 * 3))
    ttt = scaling([one, two]).series[0].time_to_target
    assert ttt is not None and ttt.baseline_gpus == 1
    point = ttt.points[1]
    assert point.throughput_speedup == pytest.approx(2 * 2.0 / 2.5)  # scaled speed-up: twice the work per step
    assert point.effective_speedup is not None and point.effective_speedup < 1
    assert "the larger batch needs more epochs" in ttt.summary
    assert "2 GPUs reach val_accuracy >= 0.9 in 11 s" in ttt.summary and "2.2x later than 1 GPU" in ttt.summary


def test_identical_curves_raise_no_convergence_flag(session, tmp_path):
    experiment = weak(session)
    for gpus in (1, 2, 4):
        target_run(session, experiment, tmp_path / str(gpus), gpus, [0.5, 0.8, 0.93], global_batch_size=64 * gpus)
    rows = compare_rows(session, experiment_ids=[experiment.id])
    assert not any(codes(row) & {FlagCode.slower_convergence, FlagCode.converged_suspiciously_fast} for row in rows)
    assert [row.statistical_efficiency for row in rows] == pytest.approx([1.0, 1.0, 1.0])


def test_fewer_epochs_than_the_baseline_is_converged_suspiciously_fast(session, tmp_path):
    experiment = weak(session)
    target_run(session, experiment, tmp_path / "1", 1, [0.5, 0.8, 0.93], global_batch_size=64)
    target_run(session, experiment, tmp_path / "2", 2, [0.95, 0.96, 0.97], global_batch_size=128)
    two = by_gpus(compare_rows(session, experiment_ids=[experiment.id]))[2][0]
    flag = next(flag for flag in two.flags if flag.code == FlagCode.converged_suspiciously_fast)
    assert flag.severity == "warning" and "data split" in flag.message


def test_repeats_judge_convergence_by_their_intervals(session, tmp_path):
    """Three repeats each: 2-3 epochs at the baseline against 3-4 at 2 GPUs overlap (no flag); against 6-7 they
    part (flagged), and the points have intervals of time and epochs."""
    curves = {2: [0.5, 0.95, 0.96, 0.97, 0.98, 0.99, 0.99], 3: [0.5, 0.6, 0.95, 0.96, 0.97, 0.98, 0.99]}
    curves |= {4: [0.5, 0.6, 0.7, 0.95, 0.96, 0.97, 0.98], 6: [0.1] * 5 + [0.95, 0.96]}
    curves |= {7: [0.1] * 6 + [0.95]}
    for name, later in (("overlap", (3, 4, 4)), ("apart", (6, 7, 7))):
        experiment = experiment_row(session, name=name)
        for seed, (first, second) in enumerate(zip((2, 3, 3), later, strict=True)):
            target_run(session, experiment, tmp_path / name / f"1-{seed}", 1, curves[first], seed=seed)
            target_run(session, experiment, tmp_path / name / f"2-{seed}", 2, curves[second], seed=seed)
        rows = compare_rows(session, experiment_ids=[experiment.id])
        flagged = any(FlagCode.slower_convergence in codes(row) for row in rows)
        assert flagged == (name == "apart")
        ttt = scaling(rows).series[0].time_to_target
        assert ttt is not None
        base = ttt.points[0]
        assert (base.scoring, base.n, base.reached) == ("mean", 3, 3)
        assert base.epochs_ci_low is not None and base.ci_low_s is not None
        assert ttt.points[1].effective_speedup_ci_low is not None


def test_five_repeats_are_scored_by_the_olympic_mean(session, tmp_path):
    experiment = experiment_row(session)
    reached_at = [2, 3, 3, 4, 0]  # 0: the fifth never reaches the target
    for seed, at in enumerate(reached_at):
        curve = [0.95 if n >= at and at else 0.5 for n in range(1, 6)]
        target_run(session, experiment, tmp_path / str(seed), 1, curve, seed=seed)
    rows = compare_rows(session, experiment_ids=[experiment.id])
    ttt = scaling(rows).series[0].time_to_target
    assert ttt is not None
    (point,) = ttt.points
    assert (point.scoring, point.n, point.reached, point.not_reached) == ("olympic", 3, 4, 1)
    # Kept: the runs at 3, 3 and 4 epochs (the fastest, at 2, and the one that did not reach dropped).
    assert point.time_to_target_s == pytest.approx(((3 + 2 + 2) * 2 + (3 + 2 * 3)) / 3)
    # MLPerf's rule has counted the run that did not reach: the answer is not hedged on it.
    assert ttt.summary.startswith("1 GPU reaches val_accuracy >= 0.9")
    # With the interval of the runs it keeps.
    low, score, high = point.ci_low_s, point.time_to_target_s, point.ci_high_s
    assert low is not None and score is not None and high is not None and low < score < high
    assert "(olympic mean of 3 runs, 95 % CI " in ttt.summary


def test_a_run_that_did_not_reach_hedges_the_answer_but_not_the_throughput_advice(session, tmp_path):
    experiment = experiment_row(session)
    curve = [0.5, 0.92, 0.95, 0.96]
    for gpus, seconds in ((1, 8.0), (2, 4.2), (4, 2.3)):
        target_run(session, experiment, tmp_path / str(gpus), gpus, curve, seconds=seconds)
    target_run(session, experiment, tmp_path / "4b", 4, [0.5, 0.6, 0.7, 0.8], seconds=2.3, seed=1)
    series = scaling(compare_rows(session, experiment_ids=[experiment.id])).series[0]
    assert series.advice == "given"
    assert series.time_to_target is not None
    assert series.time_to_target.summary.startswith("With caution, as the point at 4 GPUs (target_not_reached)")
    assert "1 of 4 runs ended without reaching it" in series.time_to_target.summary


def test_a_flagged_baseline_withholds_the_answer(session, tmp_path):
    experiment = experiment_row(session)
    target_run(session, experiment, tmp_path / "1", 1, [0.5, 0.92, 0.95, 0.96])
    target_run(session, experiment, tmp_path / "1b", 1, [0.5, 0.6, 0.7, 0.8], seed=1)
    target_run(session, experiment, tmp_path / "2", 2, [0.5, 0.92, 0.95, 0.96], seconds=1.1)
    ttt = scaling(compare_rows(session, experiment_ids=[experiment.id])).series[0].time_to_target
    assert ttt is not None and ttt.summary.startswith("No answer: the baseline, the point at 1 GPU")


def test_a_run_stopped_at_its_target_is_complete(session, tmp_path):
    """It planned 6 epochs and stopped after the third, which reached the target: no `incomplete`, and its sibling
    that ran all six is not told the two did unequal work."""
    experiment = experiment_row(session)
    target_run(session, experiment, tmp_path / "1", 1, [0.5, 0.8, 0.93], epochs=6, stop_at_target=True)
    target_run(session, experiment, tmp_path / "2", 2, [0.5, 0.8, 0.7, 0.85, 0.88, 0.89], stop_at_target=True)
    rows = by_gpus(compare_rows(session, experiment_ids=[experiment.id]))
    (one,), (two,) = rows[1], rows[2]
    assert one.stopped_at_target and not two.stopped_at_target
    assert not codes(one) & {FlagCode.incomplete, FlagCode.unequal_work}
    assert FlagCode.unequal_work not in codes(two)
    assert FlagCode.target_not_reached in codes(two)


def test_a_run_that_did_fewer_epochs_without_reaching_the_target_is_still_incomplete(session, tmp_path):
    experiment = experiment_row(session)
    target_run(session, experiment, tmp_path / "1", 1, [0.5, 0.8, 0.85], epochs=6, stop_at_target=True)
    (row,) = compare_rows(session, experiment_ids=[experiment.id])
    assert not row.stopped_at_target and FlagCode.incomplete in codes(row)


def test_the_csv_gets_the_target_columns_last(session, tmp_path):
    experiment = experiment_row(session)
    target_run(session, experiment, tmp_path / "1", 1, [0.5, 0.92])
    header, line = compare_csv(compare_rows(session, experiment_ids=[experiment.id])).splitlines()[:2]
    columns = header.split(",")
    # After every column of earlier versions, in CompareRow's order (the utilisation's columns came later still).
    targets = slice(columns.index("target_reached"), columns.index("target") + 1)
    assert columns[targets] == [
        "target_reached",
        "epochs_to_target",
        "time_to_target_s",
        "stopped_at_target",
        "effective_speedup",
        "statistical_efficiency",
        "target",
    ]
    assert line.split(",")[targets] == ["True", "2", "5.0", "False", "1.0", "1.0", "val_accuracy >= 0.9"]


def test_a_learning_rate_rule_keeps_a_weak_series_whole_and_rules_apart(session, tmp_path):
    """Under a rule each run's lr follows its global batch: the runs of one rule are one series, named by the rule,
    not by each run's rate."""
    experiment = weak(session)
    for rule in ("linear", "sqrt"):
        for gpus in (1, 2):
            target_run(
                session, experiment, tmp_path / f"{rule}-{gpus}", gpus, [0.5, 0.8, 0.93, 0.95],
                global_batch_size=64 * gpus, lr_scaling=rule, reference_lr=0.05, reference_batch=64,
                lr=0.05 * (gpus if rule == "linear" else gpus**0.5),
            )  # fmt: skip
    rows = compare_rows(session, experiment_ids=[experiment.id])
    assert {row.series for row in rows} == {"ddp, lr_scaling=linear", "ddp, lr_scaling=sqrt"}
    assert all(row.baseline_gpus == 1 and row.effective_speedup is not None for row in rows)


def test_two_runs_of_five_that_did_not_reach_leave_no_score_and_a_live_run_is_unfinished(session, tmp_path):
    experiment = experiment_row(session)
    for seed, reaches in enumerate([True, True, True, False, False]):
        curve = [0.5, 0.95, 0.96, 0.97] if reaches else [0.5, 0.6, 0.7, 0.8]
        target_run(session, experiment, tmp_path / f"1-{seed}", 1, curve, seed=seed)
    target_run(session, experiment, tmp_path / "2", 2, [0.5, 0.95, 0.96, 0.97], seconds=1.2)
    live = target_run(session, experiment, tmp_path / "2-live", 2, [0.5, 0.6], seconds=1.2, epochs=4, seed=1)
    live.state, live.ingest_done = RunState.running, False
    session.add(live)
    session.commit()
    ttt = scaling(compare_rows(session, experiment_ids=[experiment.id])).series[0].time_to_target
    assert ttt is not None
    one, two = ttt.points
    assert (one.scoring, one.time_to_target_s, one.reached, one.not_reached) == (None, None, 3, 2)
    assert (two.scoring, two.reached, two.not_reached, two.unfinished) == ("mean", 1, 0, 1)
    assert ttt.baseline_gpus == 2 and two.effective_speedup == 1.0
    assert "1 GPU: no score (2 of its 5 runs did not reach the target" in ttt.summary
    assert "1 run is still going" in ttt.summary


def test_a_programs_own_metric_can_be_its_target(session, tmp_path):
    experiment = experiment_row(session)
    program = {"command": ["python", "train.py"], "workdir": str(tmp_path)}
    target = {"metric": "bleu", "at_least": 30}
    run_spec = RunSpec.model_validate({"kind": "program", "gpus": 1, "program": program, "target": target})
    records: list[WorkerRecord] = [
        start(),
        *(epoch(n, 2.0, bleu=bleu) for n, bleu in enumerate([12.0, 29.5, 31.0, 33.0], 1)),
    ]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / OUTPUT_FILE).write_text("".join(format_record(record) + "\n" for record in records))
    run = run_row(session, experiment, tmp_path / "run", run_spec=run_spec, state=RunState.completed)
    ingest(session, run)
    run.ingest_done = True
    session.add(run)
    session.commit()
    (row,) = compare_rows(session, experiment_ids=[experiment.id])
    assert (row.target_reached, row.epochs_to_target, row.time_to_target_s) == (True, 3, 6.0)
    assert row.metrics["bleu"] == 33.0
