"""Password sign-ins that cannot be used to guess passwords, nor to slow everyone else down.

Every password path (the /login form, `POST /api/tokens` with HTTP Basic, and through them PAM) goes through
`sign_in_with_password`:

- a failure budget per user name and per client address (`Settings.signin_failures_per_name`, `..._per_address`):
  failures within `signin_window_s` of the first are counted, and once a budget is spent every further attempt is
  refused without checking its password (`Throttled`: 429 with Retry-After) until the window ends. The counts are
  rows of the database (`SignInFailures`), so every server process counts the same failures and a restart forgets
  none; a success clears its name's count, never its address's.
- at most `password_checks` password checks at once in this process (`PasswordChecks`): each costs about 50 ms of
  scrypt, or a PAM conversation, and a flood of them took the CPU every other request needs. A sign-in waits
  `password_check_wait_s` at most for its turn, in the event loop (holding no thread), and is then answered 503
  (`Busy`). The bound is per process: N server processes check at most N times as many at once.
- each failure is logged with the name and the address (never the password).

A budget per name lets anyone lock a name out for a window (as any lockout does): the window is short, and
`python -m server users unlock NAME` ends it at once.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import anyio
import anyio.to_thread
from sqlalchemy import delete, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from server.config import Settings
from server.models import SignInFailures, User, utcnow
from server.services import users

log = logging.getLogger(__name__)

# How often a sign-in waiting for a turn looks again, at most (it starts at a few milliseconds and doubles).
_LONGEST_NAP_S = 0.1
# Counting a failure again after losing a race to open a key's window: the second try finds the window open.
_TRIES = 3


@dataclass(frozen=True)
class Throttled:
    """Too many failures for this name or from this address: refused unchecked until `retry_after_s` have passed."""

    message: str
    retry_after_s: int


@dataclass(frozen=True)
class Busy:
    """Every turn to check a password was taken for longer than a sign-in waits."""

    message: str
    retry_after_s: int


class PasswordChecks:
    """The turns to check a password in this process: a plain counter of free ones, as the sign-ins that take them
    may come from different event loops (one per TestClient call, or per server thread), which an event loop's own
    semaphore cannot serve; a sign-in without a turn naps in its event loop and looks again."""

    def __init__(self, limit: int) -> None:
        self._free = threading.BoundedSemaphore(limit)

    async def take(self, wait_s: float) -> bool:
        """Whether a turn was taken within `wait_s`; whoever took one gives it back with `give_back`."""
        deadline = time.monotonic() + wait_s
        nap = 0.002
        while not self._free.acquire(blocking=False):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await anyio.sleep(min(nap, left))
            nap = min(nap * 2, _LONGEST_NAP_S)
        return True

    def give_back(self) -> None:
        self._free.release()


def _keys(name: str, address: str) -> tuple[str | None, str]:
    """The rows that count this attempt's failures: its name's (only a name someone can have: nothing else costs a
    check, nor should fill the table), and its address's."""
    name_key = f"name:{name}" if users.possible_name(name) else None
    return name_key, f"address:{address[:64]}"


def _refused_until(session: Session, keys: tuple[str | None, str], settings: Settings) -> datetime | None:
    """When the latest spent budget of these keys ends; None where none is spent."""
    name_key, address_key = keys
    budgets = {address_key: settings.signin_failures_per_address}
    if name_key is not None:
        budgets[name_key] = settings.signin_failures_per_name
    now = utcnow()
    rows = session.exec(select(SignInFailures).where(col(SignInFailures.key).in_(list(budgets)))).all()
    spent = [row.window_ends for row in rows if row.window_ends > now and row.failures >= budgets[row.key]]
    return max(spent, default=None)


def _count_failure(session: Session, keys: tuple[str | None, str], settings: Settings) -> None:
    """One more failure for each key, in its open window, else in a new one. Two processes may open the same key's
    window at once: the one whose insert loses counts again, into the window the other opened."""
    for attempt in range(_TRIES):
        try:
            now = utcnow()
            session.exec(delete(SignInFailures).where(col(SignInFailures.window_ends) <= now))
            for key in keys:
                if key is None:
                    continue
                counted = session.exec(
                    update(SignInFailures)
                    .where(col(SignInFailures.key) == key, col(SignInFailures.window_ends) > now)
                    .values(failures=SignInFailures.failures + 1)
                )
                if counted.rowcount == 0:
                    window_ends = now + timedelta(seconds=settings.signin_window_s)
                    session.add(SignInFailures(key=key, failures=1, window_ends=window_ends))
                    session.flush()
            session.commit()
            return
        except IntegrityError:
            session.rollback()
            if attempt == _TRIES - 1:
                raise


def _clear(session: Session, key: str | None) -> None:
    if key is not None:
        session.exec(delete(SignInFailures).where(col(SignInFailures.key) == key))
        session.commit()


def unlock(session: Session, name: str) -> bool:
    """An admin ends a name's failure window now (someone else's guesses locked it); whether one was open."""
    found = session.get(SignInFailures, f"name:{name}") is not None
    _clear(session, f"name:{name}")
    return found


def _throttled(until: datetime) -> Throttled:
    seconds = max(1, math.ceil((until - utcnow()).total_seconds()))
    minutes = math.ceil(seconds / 60)
    return Throttled(
        f"Too many failed sign-ins for this name or from this address: try again in {minutes} minute"
        f"{'' if minutes == 1 else 's'}, or ask an admin.",
        seconds,
    )


def check(
    session: Session, name: str, password: str, address: str, settings: Settings
) -> User | users.Refusal | Throttled:
    """The budget first, then the password (users.check_sign_in), then the count. Blocking: off the event loop."""
    keys = _keys(name, address)
    until = _refused_until(session, keys, settings)
    if until is not None:
        log.warning("sign-in of %r from %s throttled until %s: too many failures", name[:64], address, until)
        return _throttled(until)
    found = users.check_sign_in(session, name, password, settings)
    if isinstance(found, User):
        _clear(session, keys[0])
        session.refresh(found)  # loaded again after the commit: the caller may read it after the session closes
    elif found.message == users.WRONG_PASSWORD:  # not an expired account, nor PAM failing: no guess was refused
        _count_failure(session, keys, settings)
        log.warning("sign-in of %r from %s failed", name[:64], address)
    return found


def _check_on(
    database: Session | Engine, name: str, password: str, address: str, settings: Settings
) -> User | users.Refusal | Throttled:
    if isinstance(database, Session):
        return check(database, name, password, address, settings)
    with Session(database) as session:
        return check(session, name, password, address, settings)


async def sign_in_with_password(
    database: Session | Engine, checks: PasswordChecks, name: str, password: str, address: str, settings: Settings
) -> User | users.Refusal | Throttled | Busy:
    """A password sign-in from `address`, throttled and bounded (see the module's docstring), checked with the
    request's session, or with one of its own on `database` (closed in the thread that used it)."""
    if not await checks.take(settings.password_check_wait_s):
        log.warning("sign-in of %r from %s refused: every password check was busy", name[:64], address)
        return Busy("Too many sign-ins at once: try again in a few seconds.", math.ceil(settings.password_check_wait_s))
    try:
        # The same thread pool Starlette runs sync routes in (anyio's), without importing the web framework here.
        return await anyio.to_thread.run_sync(_check_on, database, name, password, address, settings)
    finally:
        checks.give_back()
