"""A lease in the database: which one of several server processes holds a role (the monitor's) at a time.

The holder renews its lease every `period_s`; a lease not renewed for `ttl_s` has expired, and the next process to
ask takes it over. Every process asks every `period_s` too, so after the holder dies another holds the lease
within ttl_s + period_s (see `timing`). Taking and renewing are one conditional UPDATE, which the database
applies to one writer at a time: two processes can never both be told they hold it.

Clocks: expiry times are written and compared with the clock of the process that asks, so the processes sharing a
database must keep their clocks in step (NTP), as they do on one host or a cluster's login nodes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, or_, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Session, col

from server.models import Lease as LeaseRow
from server.models import utcnow

log = logging.getLogger(__name__)

MONITOR = "monitor"


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

    def ask(self) -> bool:
        """Renew the lease if this process holds it, or take it if it is free or has expired; whether it holds it
        now. A database that cannot be reached answers no: the holder may be unable to renew it either."""
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
        ours = col(LeaseRow.holder) == self.holder
        expires_at = now + timedelta(seconds=self.timing.ttl_s)
        take_or_renew = (
            update(LeaseRow)
            .where(
                col(LeaseRow.name) == self.name,
                or_(ours, col(LeaseRow.holder).is_(None), col(LeaseRow.expires_at) < now),
            )
            .values(
                holder=self.holder,
                expires_at=expires_at,
                acquired_at=case((ours, LeaseRow.acquired_at), else_=now),
            )
        )
        with Session(self.engine) as session:
            if session.exec(take_or_renew).rowcount == 1:
                session.commit()
                return True
            if session.get(LeaseRow, self.name) is not None:
                return False  # another process holds it
            # The first ask on this database: the row is made by whoever asks first; a rival's insert wins the race.
            session.add(LeaseRow(name=self.name, holder=self.holder, expires_at=expires_at, acquired_at=now))
            try:
                session.commit()
            except IntegrityError:
                return False
            return True

    def release(self) -> None:
        """Give the lease up (at shutdown), so another process takes it at its next ask instead of waiting for it
        to expire."""
        release = (
            update(LeaseRow)
            .where(col(LeaseRow.name) == self.name, col(LeaseRow.holder) == self.holder)
            .values(holder=None, expires_at=self.clock())
        )
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
