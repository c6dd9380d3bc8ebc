"""One run's failure kept to that run: whatever goes wrong while its output is read (a line no check foresaw, a
record its database refuses) is logged, stops that run's reading with an event saying at which byte and why, and
holds back no other run. A database that cannot be reached or is busy is no fault of the run: it is tried again the
next cycle."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlmodel import Session

from server.models import Run
from server.services.ingestion.parsing import stop

log = logging.getLogger(__name__)
Answer = TypeVar("Answer")

# The database's own trouble (down, locked, a lost connection, a full pool): the run's output is not at fault.
TRANSIENT = (OperationalError, InterfaceError, DisconnectionError, PoolTimeout)
# How much of an exception's own words the run's reason quotes.
QUOTED_CHARS = 300


def isolated(engine: Engine, run_id: str, read: Callable[[], Answer], failed: Answer) -> Answer:
    """`read()`'s answer for one run's reading; `failed` when it failed: logged, and unless the database is at fault,
    the run's reading stopped (`stopped`)."""
    try:
        return read()
    except TRANSIENT:
        log.exception("run %s: its output could not be read into the database; trying again next cycle", run_id)
    except Exception as exc:  # (anything at all: a run's output must not stop the others')
        log.exception("run %s: reading its output failed; it is read no further", run_id)
        stopped(engine, run_id, exc)
    return failed


def stopped(engine: Engine, run_id: str, exc: BaseException) -> None:
    """Stop the run's reading at the offset it last committed, in a transaction of its own, saying why; a run that
    has ended is done with (its cut last line and its program's conclusion are not read)."""
    said = f"{type(exc).__name__}: {exc}"[:QUOTED_CHARS]
    try:
        with Session(engine) as session:
            run = session.get(Run, run_id)
            if run is None:
                return
            if run.ingest_stopped is None:
                stop(
                    session,
                    run,
                    f"the output from byte {run.log_offset} on could not be read into records ({said}). Its log can "
                    "still be read; report it to the operator if its records should have been read.",
                )
            if run.state.is_final:
                run.ingest_done = True
            session.add(run)
            session.commit()
    except Exception:  # (the cycle goes on: the run is tried, and stopped, again next cycle)
        log.exception("run %s: its reading could not be stopped", run_id)
