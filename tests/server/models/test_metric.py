"""A run's summary: the mean epoch time leaves out the warm-up epoch."""

from __future__ import annotations

import pytest

from server.models import RunSummary


@pytest.mark.parametrize(
    ("epochs_done", "first", "total", "mean"),
    [
        (0, None, 0.0, None),
        (2, None, 0.0, None),  # no epoch time reported: nothing to average
        (1, 5.0, 5.0, 5.0),  # the first epoch is all there is
        (3, 9.0, 13.0, 2.0),  # (13 - 9) / 2: the first paid for warm-up
    ],
)
def test_mean_epoch_time_leaves_out_the_first_epoch(epochs_done, first, total, mean):
    summary = RunSummary(run_id="r", epochs_done=epochs_done, first_epoch_time_s=first, epoch_time_sum_s=total)
    assert summary.mean_epoch_time_s == pytest.approx(mean)
