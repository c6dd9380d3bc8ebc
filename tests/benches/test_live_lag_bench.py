"""The live-lag benchmark at a small scale: both ways a centre may run the monitor, and nothing lost."""

from __future__ import annotations

import pytest

from benches import live_lag


@pytest.mark.parametrize("monitor_apart", [False, True], ids=["monitor in a web process", "monitor apart"])
def test_every_line_is_stored_once_and_its_lag_measured(tmp_path, monitor_apart):
    figures = live_lag.measure(
        tmp_path, runs=6, seconds=4, readers=3, poll_interval_s=0.5, workers=2, monitor_apart=monitor_apart
    )
    assert figures.lost == 0 and figures.duplicated == 0
    assert figures.lines > 0 and figures.samples > 0 and figures.reads > 0
    assert 0 < figures.stored_p95_s <= figures.seconds + 30
    note = live_lag.targets(figures)[0].note
    assert ("the monitor in a process of its own" in note) is monitor_apart
    assert (tmp_path / "monitor.log").exists() is monitor_apart
