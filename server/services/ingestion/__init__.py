"""Ingestion: the runs' new metric lines read from their output files, from the byte offset stored last time, into
records, verdicts and summaries. `ingest_runs` is the monitor's one entry point; the concerns live beside it:

- reading.py: the output file, read from an offset (complete lines, a bounded chunk at a time, the cut last line);
- parsing.py: those lines parsed into records and staged with the run's new offset (`ingest`, one run's chunk);
- storing.py: a run's records, their verdicts and its summary written in the caller's transaction (`Tally`);
- counting.py: the rule "which records count after a start or a resume of the worker", pure;
- summary.py: a run's summary folded from its records;
- live.py: runs still under way read many per transaction;
- failures.py: one run's failure kept to that run (its reading stopped, an event saying where and why).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, or_

from contract.states import FINAL_STATES, RunState
from server.models import Run
from server.runfiles import Unreadable
from server.services import fabric, programs
from server.services.ingestion.failures import isolated
from server.services.ingestion.live import ingest_live
from server.services.ingestion.parsing import DEFAULT_LIMITS, OutputLimits, ingest, ingest_tail, refuse_output
from server.services.ingestion.reading import CHUNK_BYTES, REFUSED, measure
from server.services.rundirs import owner_uid

__all__ = ["DEFAULT_LIMITS", "OutputLimits", "ingest_runs"]

# States of a run whose job may not have started yet: with no start recorded, it has no output to read.
NEVER_STARTED = (RunState.submitted, RunState.pending)
# At most this much of one run's output is read in one cycle: a run that printed more is read on in the next, so
# that one run growing its output as fast as it is read cannot keep the monitor from the others.
CYCLE_BYTES = 16 * CHUNK_BYTES


def ingest_runs(
    engine: Engine,
    caught_up: Callable[[str], None],
    limits: OutputLimits = DEFAULT_LIMITS,
    fabric_references: Mapping[str, fabric.Reference] | None = None,
) -> set[str]:
    """Read the new lines of every run whose reading is not done; returns those runs. `caught_up(run_id)` is told,
    as it happens, of each run whose stored records now reach the end of its output file.

    A run that ended, or one with more than a chunk to catch up on, is read alone, chunk by chunk; the others, with
    a little new output each, many per transaction. A run that ended is read to its end, its cut last line
    included, its program and its fabric measurements concluded (a pre-flight judged against its profile's
    `fabric_references`), and its reading done. Each run's reading is isolated: whatever goes wrong with
    one (failures.py) stops that run's reading, and the others go on in the same cycle; `limits` bound each run's.
    """
    with Session(engine) as session:
        unread = session.execute(
            # SQLAlchemy's select: sqlmodel's takes at most four columns.
            select(
                col(Run.id),
                col(Run.run_dir),
                col(Run.log_offset),
                col(Run.state),
                col(Run.output_file),
                col(Run.origin),
                col(Run.scheduler),
                col(Run.owner),
            ).where(
                col(Run.ingest_done) == False,  # noqa: E712  (SQL, not Python, comparison)
                col(Run.state).not_in([RunState.created]),
                # A job that never started has written nothing: thousands waiting in the queue cost no stat.
                # (A requeued one has started before, and is read on; this cycle's poll has already moved a
                # job that started since the last one.)
                ~(col(Run.state).in_(NEVER_STARTED) & col(Run.started_at).is_(None)),
                # A run whose reading stopped is read no further; once ended, its reading is done.
                or_(col(Run.ingest_stopped).is_(None), col(Run.state).in_(FINAL_STATES)),
            )
        ).all()
    followed: set[str] = set()
    live: dict[str, tuple[int, int]] = {}  # runs with a little new output: (offset, size) each
    for run_id, run_dir, offset, state, output_file, origin, scheduler, owner in unread:
        followed.add(run_id)
        final = RunState(state).is_final
        if output_file == REFUSED:
            # Its reading stopped for good (a requeued run comes back here): it is done once the run has ended.
            if final:
                _refused(engine, run_id, None)
            continue
        try:
            size = measure(run_dir, offset, output_file, owner_uid(origin, scheduler, owner))
        except Unreadable as problem:
            _refused(engine, run_id, problem)
            continue
        if not final and size <= offset:
            caught_up(run_id)
            continue  # nothing new: a large sweep waiting in the queue costs a stat per run, not a transaction
        if final or size - offset > CHUNK_BYTES:
            ingest_run = partial(_ingest_run, engine, run_id, size, limits, fabric_references or {})
            if isolated(engine, run_id, ingest_run, False):
                caught_up(run_id)
        else:
            live[run_id] = (offset, size)
    for run_id in ingest_live(engine, live, limits):
        caught_up(run_id)
    return followed


def _refused(engine: Engine, run_id: str, problem: Unreadable | None) -> None:
    """Record that the run's output cannot be read on (`problem`), or, for a run refused before, that its reading
    is over now that it has ended."""
    with Session(engine) as session:
        run = session.get(Run, run_id)
        if run is None:
            return
        if problem is None:
            run.ingest_done = run.state.is_final
            session.add(run)
        else:
            refuse_output(session, run, problem)
        session.commit()


def _ingest_run(
    engine: Engine, run_id: str, size: int, limits: OutputLimits, references: Mapping[str, fabric.Reference]
) -> bool:
    """Read a run that ended, or one with a backlog, chunk by chunk, a transaction each; whether it was read as far
    as `size`."""
    # Not expired at each commit: the run holds what this cycle wrote, which a query per chunk would read back.
    with Session(engine, expire_on_commit=False) as session:
        run = session.get(Run, run_id)
        if run is None:
            return False
        final = run.state.is_final  # read before ingesting: lines written before the end are all there
        start = run.log_offset
        while ingest(session, run, limits):
            session.commit()
            if not final and run.log_offset >= size:
                break  # read as far as the file reached when this cycle looked; the next one reads on
            if run.log_offset - start >= CYCLE_BYTES:
                return False  # the next cycle reads on
        if final and run.output_file != REFUSED:
            ingest_tail(session, run)
            if run.output_file != REFUSED:
                programs.conclude(session, run)
                fabric.conclude(session, run, references.get(run.profile or ""))
            run.ingest_done = True
            session.add(run)
        session.commit()
        return run.log_offset >= size
