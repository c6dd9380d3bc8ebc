"""The issue's load: 50 clients submitting experiments and 200 reading, for SCALELAB_LOAD_SECONDS (default 60 s),
against one real server on one SQLite file and the real Slurm (every job held, then cancelled).

Asserted: no 5xx and no request left unanswered, "database is locked" neither in an answer nor in the server's
log, and the runs the clients were told about are exactly the database's, each with the one job Slurm holds under
its name. The latencies are printed, never asserted: the machine is shared.
"""

from __future__ import annotations

import os
import sys

import pytest

from benches.load import DEFAULT_SECONDS, READERS, SUBMITTERS, run_load

pytestmark = [pytest.mark.load, pytest.mark.slurm]

SECONDS = float(os.environ.get("SCALELAB_LOAD_SECONDS", DEFAULT_SECONDS))


def test_submitters_and_readers_at_once_lose_nothing(slurm, tmp_path, capsys):
    outcome = run_load(tmp_path, SECONDS, SUBMITTERS, READERS)
    # The figures go to the terminal even where output is captured: CI's log is where the note takes them.
    with capsys.disabled():
        sys.stdout.write(f"\n{outcome.text}\n")
    tally, audit = outcome.tally, outcome.audit
    assert not tally.server_errors, f"{len(tally.server_errors)} answers were 5xx: {tally.server_errors[:5]}"
    assert not tally.errors, f"{len(tally.errors)} requests got no answer: {tally.errors[:5]}"
    assert not tally.locked, f"'database is locked' reached clients: {tally.locked[:5]}"
    assert tally.runs, "no experiment was submitted"
    reads = sum(len(tally.latencies[op]) for op in tally.latencies if op != "submit")
    assert reads, "no read was answered"
    assert not audit.problems(tally), "\n".join(audit.problems(tally))
    assert audit.db_runs == len(tally.runs) == audit.slurm_jobs
