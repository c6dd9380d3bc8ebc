"""The monitor-cycle benchmark at a tiny scale on the real Slurm: every figure comes back, the scheduler calls per
cycle are one squeue and no sacct (every job is still queued), and squeue returns the runs' jobs only, not the other
user's. No timing is asserted: the figures are the benchmark's to print."""

from __future__ import annotations

import os

import pytest

from benches import monitor_cycle
from benches.targets import table_of

pytestmark = pytest.mark.slurm


def test_the_benchmark_counts_one_squeue_per_cycle_returning_only_the_runs_jobs(slurm):
    if os.geteuid() != 0:
        pytest.skip("the benchmark runs the monitor's commands as an account of its own, which needs root")
    live, others = 12, 20
    figures = {target.what: target for target in monitor_cycle.targets(live=live, others=others, steady=2)}
    print("\n" + table_of(list(figures.values())))  # noqa: T201 - the figures, for the log
    assert figures["squeue calls per cycle"].measured == 1
    assert figures["sacct calls per cycle"].measured == 0
    assert figures["squeue rows returned per cycle"].measured == live
    assert figures["squeue rows returned per cycle"].baseline == live  # old main's squeue filtered in squeue itself
    assert len(figures) == 7
