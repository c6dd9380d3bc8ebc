"""The comparison as CSV: flags, intervals and counts in their columns."""

from __future__ import annotations

import csv
import io

from server.services.comparison import compare_csv, compare_rows
from tests.factories import experiment_row
from tests.server.services.comparison.timed import timed_run


def test_csv_carries_flags_intervals_and_n(session, tmp_path):
    experiment = experiment_row(session)
    timed_run(session, experiment, tmp_path / "1", 1, [5.0, 3.5])
    timed_run(session, experiment, tmp_path / "2", 2, [5.0, 0.3])
    text = compare_csv(compare_rows(session, experiment_ids=[experiment.id]))
    header = text.splitlines()[0].split(",")
    assert {"flags", "point_mean_s", "point_ci_low_s", "point_ci_high_s", "point_n"} <= set(header)
    assert "superlinear: efficiency" in text
    # What each point compares, and the run time beside it (none for runs whose launches were not timed).
    assert {(row["measure"], row["run_time_s"]) for row in _table(text)} == {("epoch_time_s", "")}
    assert "resources.nothing_to_divide" in header


def _table(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_a_breakdown_part_of_a_programs_own_is_a_column_of_its_own(session, tmp_path):
    """A program may time a part the built-in models do not (`forward`): it is exported after the known parts,
    never an error."""
    experiment = experiment_row(session)
    breakdown = {"data": 0.1, "compute": 0.5, "optimizer": 0.1, "comm": 0.2, "forward": 0.3}
    timed_run(session, experiment, tmp_path / "1", 1, [5.0, 3.5], epoch_fields={"time_breakdown": breakdown})
    timed_run(session, experiment, tmp_path / "2", 2, [5.0, 2.0])
    text = compare_csv(compare_rows(session, experiment_ids=[experiment.id]))
    rows = _table(text)
    header = text.splitlines()[0].split(",")
    assert header.index("time_breakdown.forward") == header.index("time_breakdown.comm") + 1
    assert sorted(row["time_breakdown.forward"] for row in rows) == ["", "0.3"]


def test_cells_a_spreadsheet_would_run_are_neutralised_and_numbers_stay_numbers(session, tmp_path):
    """OWASP's advice for CSV injection: a text cell starting with = + - @ tab or CR gets a leading quote, so a
    spreadsheet shows it as text. Negative numbers are numbers, and stay as they are."""
    experiment = experiment_row(session)
    formulas = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"]
    for n, formula in enumerate(formulas, 1):
        timed_run(
            session,
            experiment,
            tmp_path / str(n),
            1,
            [5.0, 3.0],
            epoch_fields={"peak_memory_bytes": 2**20, "memory_kind": formula, "drift": -1.5},
        )
    rows = _table(compare_csv(compare_rows(session, experiment_ids=[experiment.id])))
    # A CR, a line break to a spreadsheet, is written as LF: quoted, it stays inside its cell.
    assert sorted(row["memory_kind"] for row in rows) == sorted(
        f"'{formula}".replace("\r", "\n") for formula in formulas
    )
    assert {row["metric.drift"] for row in rows} == {"-1.5"}
