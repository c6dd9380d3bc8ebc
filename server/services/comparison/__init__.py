"""Per-run figures side by side, grouped into scaling series and points (a series at one GPU count, over its
repeats), with speed-up and efficiency against each series' smallest point, the flags that say which figures
cannot be trusted and why (decided in server.services.flags), and per series the fitted scaling laws.

selection: which runs, and who may see them; measures: each run's row, kept for a finished run; series: series,
points and fits; export: the CSV; answers: a selection compared, and its whole answer kept."""

from __future__ import annotations

from server.services.comparison.answers import compare_answer, compare_rows, recomputed_answer, selected_rows
from server.services.comparison.export import METRIC_COLUMN, compare_csv
from server.services.comparison.measures import custom_metrics, epoch_histories
from server.services.comparison.selection import MAX_COMPARED_EXPERIMENTS, MAX_COMPARED_RUNS
from server.services.comparison.series import scaling

__all__ = [
    "MAX_COMPARED_EXPERIMENTS",
    "MAX_COMPARED_RUNS",
    "METRIC_COLUMN",
    "compare_answer",
    "compare_csv",
    "compare_rows",
    "custom_metrics",
    "epoch_histories",
    "recomputed_answer",
    "scaling",
    "selected_rows",
]
