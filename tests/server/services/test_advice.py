"""No confident advice from flagged points: the recommendation withheld on a flagged baseline or a superlinear point
and hedged on another flagged point; a law whose r² is below the bound advises nothing and says it does not describe
the points; numbers in sentences rounded to what they can mean; runs of a series that did unequal work flagged; and
a series says its runs keep one global batch only where that is known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from contract.records import WorkerRecord, format_record
from contract.rundir import OUTPUT_FILE
from contract.spec import RunSpec
from contract.states import RunState
from server.models import Experiment, Flag, FlagCode, Run, RunAccounting
from server.services import advice, flags, rounding, scaling_laws
from server.services.comparison import compare_rows, scaling
from server.services.ingestion.parsing import ingest
from server.services.scaling_laws import AmdahlFit, Fits, UslFit
from tests.factories import epoch, experiment_row, run_row, start
from tests.server.services.comparison.timed import codes, timed_run

# ---- the rule: given, hedged, withheld ---------------------------------------------------------------------------

CLEAN = "Efficiency stays at or above 80 % up to 16 GPUs (USL). No peak within 4x the largest count measured."


def warning(code: FlagCode) -> Flag:
    return Flag(code=code, severity="warning", message=f"{code} here")


def points(**flagged: list[FlagCode]) -> list[advice.PointWarnings]:
    """Points at 1, 2 and 4 GPUs, with the flags given by `at_N`."""
    return [advice.warnings_of(gpus, map(warning, flagged.get(f"at_{gpus}", []))) for gpus in (1, 2, 4)]


def test_a_clean_grid_still_recommends():
    assert advice.advise(CLEAN, True, 1, points()) == ("given", CLEAN)
    # A note (info) leaves the figures standing.
    noted = [advice.warnings_of(1, [Flag(code=FlagCode.warmup_dominated, severity="info", message="m")])]
    assert advice.advise(CLEAN, True, 1, noted) == ("given", CLEAN)


def test_a_flagged_baseline_withholds_the_recommendation_naming_its_flags():
    given, sentence = advice.advise(CLEAN, True, 1, points(at_1=[FlagCode.shared_node], at_4=[FlagCode.superlinear]))
    assert given == "withheld"
    assert sentence.startswith("No recommendation: the baseline, the point at 1 GPU (shared_node), carries warnings")
    assert "80 %" not in sentence


def test_any_warning_on_the_baseline_withholds_not_only_a_listed_one():
    # A flag added later (here unequal_work) counts as any other warning does.
    given, sentence = advice.advise(CLEAN, True, 1, points(at_1=[FlagCode.unequal_work]))
    assert given == "withheld" and "(unequal_work)" in sentence


def test_a_superlinear_point_withholds_the_recommendation():
    given, sentence = advice.advise(CLEAN, True, 1, points(at_4=[FlagCode.superlinear]))
    assert given == "withheld"
    assert "the point at 4 GPUs (superlinear) is better than ideal" in sentence and "80 %" not in sentence


def test_another_flagged_point_hedges_the_recommendation_naming_each_point_and_flag():
    given, sentence = advice.advise(
        CLEAN, True, 1, points(at_2=[FlagCode.oversubscribed], at_4=[FlagCode.shared_node, FlagCode.noisy])
    )
    assert given == "hedged"
    assert sentence == (
        "With caution, as the points at 2 GPUs (oversubscribed) and 4 GPUs (shared_node, noisy) carry warnings "
        f"and this rests on them: {CLEAN}"
    )


def test_no_law_that_describes_the_points_withholds_on_clean_points_too():
    assert advice.advise("No recommendation: no law describes", False, 1, points()) == (
        "withheld",
        "No recommendation: no law describes",
    )


def test_the_issue_case_a_slowed_shared_baseline_withholds_through_the_comparison(session, tmp_path):
    """A baseline slowed by another job (2.86 s an epoch against 0.03 on its own): speed-up 19.9 at 4 GPUs, flagged
    superlinear and shared_node, and no "efficiency stays at or above 80 %" under it."""
    experiment = experiment_row(session)
    baseline = timed_run(session, experiment, tmp_path / "1", 1, [3.0, 2.86, 2.86, 2.86])
    for gpus, seconds in ((2, 0.2), (4, 0.1437), (8, 0.09)):
        timed_run(session, experiment, tmp_path / str(gpus), gpus, [1.0] + [seconds] * 3)
    session.add(RunAccounting(run_id=baseline.id, job_id="7", elapsed_s=12, shared_with=["4242"]))
    session.commit()
    rows = compare_rows(session, experiment_ids=[experiment.id])
    assert {FlagCode.shared_node} <= codes(rows[0]) and FlagCode.superlinear in codes(rows[2])
    (series,) = scaling(rows).series
    assert series.advice == "withheld"
    assert series.recommendation.startswith("No recommendation: the baseline, the point at 1 GPU (shared_node")
    assert "Efficiency stays" not in series.recommendation


def test_a_clean_series_through_the_comparison_still_recommends(session, tmp_path):
    experiment = experiment_row(session)
    for gpus in (1, 2, 4):
        timed_run(session, experiment, tmp_path / str(gpus), gpus, [8.0 / gpus + 1] + [8.0 / gpus] * 3)
    (series,) = scaling(compare_rows(session, experiment_ids=[experiment.id])).series
    assert series.advice == "given" and series.recommendation.startswith("Efficiency stays at or above 80 %")


# ---- the r² bound -------------------------------------------------------------------------------------------------


def test_a_fit_below_the_r2_bound_does_not_describe_the_points_and_advises_nothing():
    # Speed-ups that rise and fall back, as a disturbed series does: no law of the two follows them.
    fits = scaling_laws.fit([1, 2, 4, 8], [1.0, 6.0, 1.2, 7.0])
    assert fits.amdahl is not None and fits.usl is not None
    assert fits.usl.r2 < scaling_laws.R2_BOUND and not fits.usl.describes_points
    assert not fits.amdahl.describes_points
    text = scaling_laws.recommendation(fits, 1, 8)
    assert text.startswith("No recommendation: no law describes these points (Amdahl's law r² ")
    assert f"below {scaling_laws.R2_BOUND}" in text and "Efficiency" not in text
    summary = scaling_laws.summary(fits, 1, 8)
    assert summary.count("does not describe the points, r² below 0.9; not drawn") == 2
    assert "slower" not in summary and "peak" not in summary  # a law that does not fit says nothing of a peak


def test_the_r2_bound_is_stated_and_a_close_fit_describes_the_points():
    fits = scaling_laws.fit([1, 2, 4, 8], [1.0, 1.95, 3.7, 6.8])
    assert fits.amdahl is not None and fits.amdahl.describes_points
    assert scaling_laws.describes(scaling_laws.R2_BOUND) and not scaling_laws.describes(scaling_laws.R2_BOUND - 0.01)
    assert "does not describe" not in scaling_laws.summary(fits, 1, 8)


def test_the_issue_r2_of_minus_1_6_is_marked_and_withholds():
    fits = Fits(amdahl=None, usl=UslFit(sigma=0.1, kappa=0.01, r2=-1.6, peak_gpus=9.5), refused=None, baseline_gpus=1)
    assert scaling_laws.recommendation(fits, 1, 4).startswith("No recommendation: no law describes these points")
    assert "(r² -1.6: does not describe the points" in scaling_laws.summary(fits, 1, 4)


# ---- rounding -----------------------------------------------------------------------------------------------------


def test_numbers_are_rounded_to_what_they_can_mean():
    assert rounding.rounded(5e-324, 1e-4) == "≈ 0"
    assert rounding.rounded(0.0, 1e-4) == "0"
    assert rounding.rounded(0.02134, 1e-4) == "0.021"
    assert rounding.rounded(-1.6234, 0.005) == "-1.6"
    assert rounding.rounded(1234.5, 1e-4) == "1234"
    assert rounding.gpus(7.3e-9) == "1 GPU" and rounding.gpus(21.4) == "21 GPUs"


def test_the_issue_sigma_of_5e_324_and_peak_of_7_3e_9_gpus_read_as_what_they_mean():
    fits = Fits(
        amdahl=AmdahlFit(serial_fraction=5e-324, r2=0.99),
        usl=UslFit(sigma=5e-324, kappa=0.9, r2=0.95, peak_gpus=7.3e-9),
        refused=None,
        baseline_gpus=1,
    )
    summary = scaling_laws.summary(fits, 1, 4)
    recommendation = scaling_laws.recommendation(fits, 1, 4)
    for text in (summary, recommendation):
        assert "e-" not in text and "0.0000000" not in text, text
    assert "serial fraction ≈ 0" in summary and "\N{GREEK SMALL LETTER SIGMA} ≈ 0" in summary
    # The peak lies below the baseline: said as such, never as a count of GPUs below one.
    assert "adding GPUs to the baseline of 1 GPU already makes it slower" in summary
    assert recommendation.endswith("Adding GPUs to the baseline of 1 GPU already makes it slower (USL peak).")


def test_a_peak_past_the_horizon_is_said_as_no_peak_within_it():
    fits = Fits(amdahl=None, usl=UslFit(sigma=0.01, kappa=1e-9, r2=0.99, peak_gpus=31_000.0), refused=None)
    assert "no peak within 4x the largest count measured (32 GPUs)" in scaling_laws.summary(fits, 1, 8)


# ---- equal work ---------------------------------------------------------------------------------------------------


def work(run_id: str, epochs: int, samples: float | None = None, judged: bool = True) -> flags.Work:
    return flags.Work(run_id=run_id, series="s", epochs=epochs, samples=samples, judged=judged)


def test_runs_of_a_series_with_unequal_epochs_are_flagged_naming_each_amount():
    raised = flags.check_unequal_work([work("r1", 50), work("r2", 10), work("r3", 10)])
    assert set(raised) == {"r1", "r2", "r3"}
    flag = raised["r2"]
    assert flag.code == FlagCode.unequal_work and flag.severity == "warning"
    assert "unequal work (50 epochs (run r1); 10 epochs (runs r2, r3))" in flag.message


def test_a_shortfall_an_incomplete_flag_explains_is_not_unequal_work():
    assert flags.check_unequal_work([work("r1", 50), work("r2", 10, judged=False), work("r3", 50)]) == {}


def test_unequal_samples_are_flagged_where_every_run_says_them():
    assert set(flags.check_unequal_work([work("a", 5, 50_000), work("b", 5, 25_000)])) == {"a", "b"}
    assert flags.check_unequal_work([work("a", 5, 50_000), work("b", 5, 49_900)]) == {}  # a padded last batch
    assert flags.check_unequal_work([work("a", 5, 50_000), work("b", 5, None)]) == {}  # not said by every run


def program_run(
    session: Session, experiment: Experiment, run_dir: Path, gpus: int, records: list[WorkerRecord], **program: Any
) -> Run:
    """A completed program run whose output holds these records, ingested as the monitor would."""
    run_dir.mkdir(parents=True)
    (run_dir / OUTPUT_FILE).write_text("".join(format_record(record) + "\n" for record in records))
    spec = RunSpec.model_validate(
        {"kind": "program", "gpus": gpus, "program": {"command": ["python", "train.py"], "workdir": "/w", **program}}
    )
    run = run_row(session, experiment, run_dir, run_spec=spec, state=RunState.completed)
    ingest(session, run)
    run.ingest_done = True
    session.add(run)
    session.commit()
    return run


def test_the_issue_case_siblings_resumed_from_a_snapshot_are_flagged_unequal_work(session, tmp_path):
    """Epochs 50 / 10 / 10: the 2- and 4-process runs resumed the 1-process run's snapshot."""
    experiment = experiment_row(session)
    for gpus, done in ((1, 50), (2, 10), (4, 10)):
        records: list[WorkerRecord] = [start(), *(epoch(n, 1.0 / gpus) for n in range(1, done + 1))]
        program_run(session, experiment, tmp_path / str(gpus), gpus, records)
    rows = compare_rows(session, experiment_ids=[experiment.id])
    assert [row.epochs_done for row in rows] == [50, 10, 10]
    assert all(FlagCode.unequal_work in codes(row) for row in rows)
    assert scaling(rows).series[0].advice == "withheld"


def test_worker_runs_short_of_their_epochs_are_incomplete_not_unequal_work(session, tmp_path):
    experiment = experiment_row(session)
    timed_run(session, experiment, tmp_path / "1", 1, [2.0, 1.0, 1.0], epochs=3)
    short = timed_run(session, experiment, tmp_path / "2", 2, [1.0, 0.5], epochs=3)
    rows = {row.run_id: row for row in compare_rows(session, experiment_ids=[experiment.id])}
    assert FlagCode.incomplete in codes(rows[short.id])
    assert not any(FlagCode.unequal_work in codes(row) for row in rows.values())


# ---- what the runs train per step ----------------------------------------------------------------------------------


def batch_of(session: Session, tmp_path: Path, **program: Any) -> str:
    experiment = experiment_row(session)
    for gpus in (1, 2, 4):
        program_run(session, experiment, tmp_path / str(gpus), gpus, [start(), epoch(1, 2.0), epoch(2, 1.0)], **program)
    return scaling(compare_rows(session, experiment_ids=[experiment.id])).series[0].batch


def test_a_program_without_a_declared_batch_is_not_said_to_keep_its_global_batch(session, tmp_path):
    text = batch_of(session, tmp_path)
    assert "same global batch" in text and text.startswith("the program does not declare its batch")


def test_a_program_declaring_a_global_batch_keeps_it(session, tmp_path):
    assert batch_of(session, tmp_path, batch={"per": "global", "size": 256}) == (
        "every run trains the same global batch of 256"
    )


def test_a_program_whose_batch_is_per_process_is_said_to_grow_it(session, tmp_path):
    text = batch_of(session, tmp_path, batch={"per": "process", "param": "batch_size"}, params={"batch_size": 32})
    assert text == "the batch per GPU stays 32 and the global batch grows with the GPUs (32 to 128)"


def test_the_worker_keeps_its_global_batch_under_strong_scaling(session, tmp_path):
    experiment = experiment_row(session)
    for gpus in (1, 2):
        timed_run(session, experiment, tmp_path / str(gpus), gpus, [2.0, 1.0 / gpus])
    (series,) = scaling(compare_rows(session, experiment_ids=[experiment.id])).series
    assert series.batch == "every run trains the same global batch of 64"


@pytest.mark.parametrize(
    ("batch", "params", "refused"),
    [
        ({"per": "process", "param": "batch_size"}, {}, "names 'batch_size', which is not among the program's params"),
        ({"per": "process", "param": "batch_size"}, {"batch_size": "big"}, "is not a positive whole number"),
        ({"per": "global"}, {}, "give the batch's size or the parameter that holds it"),
        ({"per": "global", "size": 8, "param": "b"}, {"b": 8}, "give the batch's size or the parameter that holds it"),
        ({"per": "each", "size": 8}, {}, "'global' or 'process'"),
    ],
)
def test_a_declared_batch_is_checked(batch: dict[str, Any], params: dict[str, Any], refused: str):
    program = {"command": ["python", "t.py"], "workdir": "/w", "batch": batch, "params": params}
    with pytest.raises(ValueError, match=refused):
        RunSpec.model_validate({"kind": "program", "program": program})
