"""The one-run centre benchmark: each part it is asked for prints its figures in the one table, and a part that
cannot run here is said to be skipped, with why, while the others still run."""

from __future__ import annotations

import pytest

from benches import centre
from tests.databases import postgres_or_skip

TINY = centre.Scale(
    ingest_runs=3, ingest_records=250, read_runs=3, read_requests=5, load_seconds=1, lag_runs=2, lag_seconds=1,
    lag_readers=1, cycle_live=1, cycle_others=0,
)  # fmt: skip


def test_ingestion_is_measured_on_both_databases_in_one_table(capsys):
    measured, failed = centre.run_parts(["ingest-sqlite", "ingest-postgresql"], TINY, 1, postgres_or_skip())
    assert failed == 0
    names = [row.what for row in measured]
    assert "ingestion, monitor's path, sqlite" in names and "ingestion, monitor's path, postgresql" in names
    assert all(row.measured > 0 for row in measured)
    printed = capsys.readouterr().out
    assert "== ingest-sqlite" in printed and "== ingest-postgresql" in printed and "skipped" not in printed


def test_a_part_that_cannot_run_is_skipped_saying_why_and_the_others_run(capsys):
    measured, failed = centre.run_parts(["ingest-postgresql", "ingest-sqlite"], TINY, 1, None)
    assert failed == 0 and {row.what.split(", ")[-1] for row in measured[:1]} == {"sqlite"}
    assert "skipped: no PostgreSQL: give --postgres-url" in capsys.readouterr().out


def test_the_command_says_what_it_runs(capsys):
    with pytest.raises(SystemExit) as ended:
        centre.main(["--help"])
    assert ended.value.code == 0
    said = capsys.readouterr().out
    assert "--quick" in said and "--postgres-url" in said and "monitor-cycle" in said
