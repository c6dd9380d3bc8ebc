"""The comparison as CSV: flags, intervals and counts in their columns."""

from __future__ import annotations

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
