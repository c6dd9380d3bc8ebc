"""The issue's load: 50 clients submitting experiments and 200 reading, for SCALELAB_LOAD_SECONDS (default 30 s:
the benchmark, benches.load, runs 60), against one real server of two processes on each database (a SQLite file,
PostgreSQL) and the real Slurm (every job held, then cancelled).

Asserted: no 5xx and no request left unanswered, "database is locked" neither in an answer nor in the server's
log, and the runs the clients were told about are exactly the database's, each with the one job Slurm holds under
its name. The latencies are printed, never asserted: the machine is shared.
"""

from __future__ import annotations

import os
import sys

import pytest

from benches.load import READERS, SUBMITTERS, run_load

pytestmark = [pytest.mark.load, pytest.mark.slurm]

SECONDS = float(os.environ.get("SCALELAB_LOAD_SECONDS", 30))


def test_submitters_and_readers_at_once_lose_nothing(slurm, tmp_path, capsys, database_url):
    outcome = run_load(tmp_path, SECONDS, SUBMITTERS, READERS, workers=2, database_url=database_url)
    # The figures go to the terminal even where output is captured: CI's log is where the note takes them.
    with capsys.disabled():
        sys.stdout.write(f"\n{outcome.text}\n")
    tally, audit = outcome.tally, outcome.audit
    assert not tally.server_errors, f"{len(tally.server_errors)} answers were 5xx: {tally.server_errors[:5]}"
    assert not tally.errors, f"{len(tally.errors)} requests got no answer: {tally.errors[:5]}"
    assert not tally.locked, f"'database is locked' reached clients: {tally.locked[:5]}"
    assert tally.runs, "no experiment was submitted"
    reads = {op: counts for op, counts in tally.statuses.items() if op != "submit"}
    assert reads, "no read was answered"
    # Each read found what it asked for: a 404 would be a read that measured nothing.
    assert all(set(counts) == {200} for counts in reads.values()), reads
    assert not audit.problems(tally), "\n".join(audit.problems(tally))
    assert audit.db_runs == len(tally.runs) == audit.slurm_jobs
