"""Runs still under way read many per transaction: their new lines batched by bytes and runs, a batch that fails
read again one run per transaction (where a run that fails alone is stopped, failures.py), and on a database server
of its own two batches stored at once."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from server.models import Run
from server.services.ingestion.failures import isolated
from server.services.ingestion.parsing import DEFAULT_LIMITS, OutputLimits, ingest

log = logging.getLogger(__name__)

# A transaction of live runs reads at most about this much (their new bytes together) and this many runs: SQLite
# holds its one writer's lock until the commit, and other writers wait that long.
BATCH_BYTES = 1024 * 1024
BATCH_RUNS = 256
# Batches stored at once where the database is a server of its own: while it takes one batch's rows (COPY, its
# indexes, the commit) this process reads and parses the next, instead of waiting for it; on a login node of 2
# cores this took a backlog on PostgreSQL from 80-89,000 to 134-146,000 records/s (benches.ingest). SQLite has one
# writer: its batches go one by one.
CONCURRENT_BATCHES = 2


def ingest_live(
    engine: Engine, runs: Mapping[str, tuple[int, int]], limits: OutputLimits = DEFAULT_LIMITS
) -> list[str]:
    """Read the new complete lines of runs still under way, each given as (offset, size) with fewer new bytes than
    a chunk, many runs per transaction; the runs read as far as their size, whose records are now all stored.

    Each run's records and offset are still committed together, or not at all; but a cycle of hundreds of live runs
    pays one query for their rows, one flush and one commit per batch instead of per run. A batch that fails is read
    again one run per transaction, so that a run that cannot be read or stored holds back no other: whatever fails
    for a run alone stops that run's reading (failures.py). A run is in one batch only, so batches stored at once
    never store a run's records twice.
    """
    batches = list(_batches(runs))
    if engine.dialect.name == "sqlite" or len(batches) < 2:
        stored = [_ingest_batch_or_each(engine, batch, runs, limits) for batch in batches]
    else:
        with ThreadPoolExecutor(CONCURRENT_BATCHES, thread_name_prefix="ingest") as pool:
            stored = list(pool.map(lambda batch: _ingest_batch_or_each(engine, batch, runs, limits), batches))
    return [run_id for done in stored for run_id in done]


def _ingest_batch_or_each(
    engine: Engine, batch: list[str], runs: Mapping[str, tuple[int, int]], limits: OutputLimits
) -> list[str]:
    try:
        return _ingest_batch(engine, batch, runs, limits)
    except Exception as exc:  # (the batch's transaction rolled back whole: its runs are read alone)
        log.warning("reading %d runs' records at once failed, reading them one run at a time: %s", len(batch), exc)
    done: list[str] = []
    for run_id in batch:
        # Nothing of a run that fails was stored, its offset included.
        done += isolated(engine, run_id, partial(_ingest_batch, engine, [run_id], runs, limits), [])
    return done


def _batches(runs: Mapping[str, tuple[int, int]]) -> Iterator[list[str]]:
    batch: list[str] = []
    new_bytes = 0
    for run_id, (offset, size) in runs.items():
        if batch and (new_bytes + size - offset > BATCH_BYTES or len(batch) == BATCH_RUNS):
            yield batch
            batch, new_bytes = [], 0
        batch.append(run_id)
        new_bytes += size - offset
    if batch:
        yield batch


def _ingest_batch(
    engine: Engine, run_ids: list[str], runs: Mapping[str, tuple[int, int]], limits: OutputLimits
) -> list[str]:
    with Session(engine, expire_on_commit=False) as session:
        found = session.exec(select(Run).where(col(Run.id).in_(run_ids))).all()
        for run in found:
            ingest(session, run, limits)
        session.commit()
    return [run.id for run in found if run.log_offset >= runs[run.id][1]]
