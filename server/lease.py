"""A lease in the database: which one of several server processes holds a role (the monitor's) at a time.

The holder renews its lease every `period_s`; every other process asks every `period_s` too, and takes the lease
over when its holder is gone:
- a holder on this host whose process has ended (kill -9, a crash) is gone at once: taken at the next ask;
- a holder on another host is gone once its lease has not been renewed for `ttl_s`: taken within ttl_s + period_s,
  two monitor intervals (see `timing`);
- a holder on this host whose process still runs keeps the lease past its expiry for `HUNG_AFTER` more: on a
  loaded host, or behind SQLite's one writer while its own ingestion commits a large chunk, a live holder's renewal
  can be seconds late, and taking the lease from it would only make two monitors for a while.
Taking is a compare-and-swap (an UPDATE of the row as it was read) and renewing an UPDATE of the holder's own row;
the database applies them one at a time, so two processes are never both told they hold it.

Clocks: expiry times are written and compared with the clock of the process that asks, so the processes sharing a
database must keep their clocks in step (NTP), as they do on one host or a cluster's login nodes. Hosts are told
apart by host name: processes that share a database from different hosts (containers included) need different ones.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Session, col

from server.models import Lease as LeaseRow
from server.models import utcnow
from server.processes import process_runs

log = logging.getLogger(__name__)

MONITOR = "monitor"
# How long past its expiry a holder whose process still runs on this host keeps the lease: only a hung process goes
# that long without renewing it.
HUNG_AFTER = timedelta(minutes=1)


def holder_id() -> str:
    """Who this process is, for the lease row and for an operator reading it: host, pid, and a nonce (a pid can be
    reused by a later process)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass(frozen=True)
class LeaseTiming:
    """How often a process asks for the lease, and how long an unrenewed lease lasts."""

    period_s: float
    ttl_s: float

    @property
    def takeover_bound_s(self) -> float:
        """The longest a dead holder keeps the lease from the others: its last renewal's lease runs out, then the
        others ask within one period."""
        return self.ttl_s + self.period_s


def timing(interval_s: float) -> LeaseTiming:
    """The monitor's lease for a cycle every `interval_s`: asked for (renewed) twice an interval, lasting an
    interval and a half, so a holder may miss two renewals in a row (a slow database) without losing it, and a dead
    holder's lease passes on within two intervals."""
    return LeaseTiming(period_s=interval_s / 2, ttl_s=interval_s * 1.5)


class Lease:
    """This process's side of one named lease."""

    def __init__(
        self,
        engine: Engine,
        timing: LeaseTiming,
        name: str = MONITOR,
        holder: str | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.engine = engine
        self.timing = timing
        self.name = name
        self.holder = holder or holder_id()
        self.clock = clock
        # Whether the last ask confirmed this process holds it: what the monitor checks before each cycle.
        self.held = False
        # Once released, asked no more: an ask already under way in a thread (keep's, cancelled at shutdown but
        # not stopped, as a thread cannot be) found the row released and took the lease back after the release.
        self._released = False
        self._asking = threading.Lock()

    def ask(self) -> bool:
        """Renew the lease if this process holds it, or take it if it is free or has expired; whether it holds it
        now. A database that cannot be reached answers no: the holder may be unable to renew it either."""
        with self._asking:
            if self._released:
                return False
            try:
                held = self._take_or_renew()
            except SQLAlchemyError as exc:
                log.warning("cannot reach the database to ask for the %s lease; not holding it: %s", self.name, exc)
                held = False
        if held != self.held:
            if held:
                log.info("this process (%s) holds the %s lease now", self.holder, self.name)
            else:
                log.warning("this process (%s) no longer holds the %s lease", self.holder, self.name)
        self.held = held
        return held

    def _take_or_renew(self) -> bool:
        now = self.clock()
        expires_at = now + timedelta(seconds=self.timing.ttl_s)
        with Session(self.engine) as session:
            row = session.get(LeaseRow, self.name)
            if row is None:
                # The first ask on this database: whoever asks first makes the row; a rival's insert wins the race.
                session.add(LeaseRow(name=self.name, holder=self.holder, expires_at=expires_at, acquired_at=now))
                try:
                    session.commit()
                except IntegrityError:
                    return False
                return True
            if row.holder == self.holder:
                swap = update(LeaseRow).where(col(LeaseRow.holder) == self.holder).values(expires_at=expires_at)
            elif self._gone(row.holder, row.expires_at, now):
                # Taken only as it was read: a rival that took or renewed it meanwhile changed the row.
                swap = (
                    update(LeaseRow)
                    .where(
                        col(LeaseRow.holder) == row.holder if row.holder else col(LeaseRow.holder).is_(None),
                        col(LeaseRow.expires_at) == row.expires_at,
                    )
                    .values(holder=self.holder, expires_at=expires_at, acquired_at=now)
                )
            else:
                return False
            taken = session.exec(swap.where(col(LeaseRow.name) == self.name)).rowcount == 1
            session.commit()
            return taken

    def _gone(self, holder: str | None, expires_at: datetime, now: datetime) -> bool:
        """Whether the lease's holder is gone (see the module's docstring)."""
        if holder is None:
            return True  # released
        host, _, rest = holder.partition(":")
        pid = rest.partition(":")[0]
        if host == socket.gethostname() and pid.isdigit():
            if not process_runs(int(pid)):
                return True
            return now > expires_at + HUNG_AFTER
        return now > expires_at

    def release(self) -> None:
        """Give the lease up (at shutdown), so another process takes it at its next ask instead of waiting for it
        to expire."""
        release = (
            update(LeaseRow)
            .where(col(LeaseRow.name) == self.name, col(LeaseRow.holder) == self.holder)
            .values(holder=None, expires_at=self.clock())
        )
        with self._asking:
            self._released = True
            try:
                with Session(self.engine) as session:
                    session.exec(release)
                    session.commit()
            except SQLAlchemyError as exc:
                log.warning("could not release the %s lease (it expires by itself): %s", self.name, exc)
            self.held = False

    async def keep(self) -> None:
        """Ask for the lease every period from now on, for ever: renewing it while held, taking it when free."""
        while True:
            await asyncio.sleep(self.timing.period_s)
            await asyncio.to_thread(self.ask)


def current(engine: Engine, name: str = MONITOR) -> LeaseRow | None:
    """The lease's row as it stands: who holds it and until when."""
    with Session(engine) as session:
        return session.get(LeaseRow, name)
