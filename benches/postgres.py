"""A throwaway database on a PostgreSQL server, for the tests and the benchmarks that need an empty one."""

from __future__ import annotations

import contextlib
import time
import uuid
import warnings
from collections.abc import Iterator

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

DROP_ATTEMPTS = 20


@contextlib.contextmanager
def postgres_database(server_url: str, prefix: str = "scalelab_test") -> Iterator[str]:
    """A new, empty database on the server of `server_url`, dropped afterwards with whatever still holds it."""
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    # AUTOCOMMIT: CREATE/DROP DATABASE refuse to run inside a transaction. NullPool: nothing stays connected.
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
        finally:
            _drop(admin, name)
    finally:
        admin.dispose()


def _drop(admin: Engine, name: str) -> None:
    # FORCE: a server process or an engine the test left open would otherwise keep the database alive. It cannot
    # end an autovacuum worker that has just started on it (a superuser's process): that one ends within moments.
    for attempt in range(DROP_ATTEMPTS):
        try:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            return
        except DBAPIError as exc:
            if attempt == DROP_ATTEMPTS - 1:
                warnings.warn(f"the test database {name} is left behind: {exc.orig}", stacklevel=1)
            time.sleep(0.5)
