"""The ingestion benchmark at a tiny scale: it stores every record once and reports its three figures."""

from __future__ import annotations

from benches import ingest


def test_the_ingestion_benchmark_measures_a_tiny_workload(tmp_path):
    figures = ingest.measure(tmp_path, None, runs=3, records_per_run=250, new_per_run=5)
    assert (figures.backlog.records, figures.cycle.records) == (750, 15)
    rows = ingest.targets(figures)
    assert [row.unit for row in rows] == ["records/s", "records/s", "ms CPU"]
    assert rows[0].baseline == ingest.BASELINE_RECORDS_PER_S and all(row.measured > 0 for row in rows)
