"""The databases the tests run on: a file of SQLite, or a new database of the test PostgreSQL for each test."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

# scripts/test starts PostgreSQL (scripts/postgres-local up) and exports its URL here; the role may create databases.
POSTGRES_URL = os.environ.get("SCALELAB_TEST_POSTGRES_URL", "")
# Set by scripts/test: where the URL is missing, the PostgreSQL half of the suites fails instead of skipping.
REQUIRE_POSTGRES = os.environ.get("SCALELAB_REQUIRE_POSTGRES") == "1"
KINDS = ("sqlite", "postgresql")
DROP_ATTEMPTS = 20


def postgres_or_skip() -> str:
    if POSTGRES_URL:
        return POSTGRES_URL
    message = "no test PostgreSQL: run `export SCALELAB_TEST_POSTGRES_URL=$(scripts/postgres-local up)`"
    if REQUIRE_POSTGRES:
        pytest.fail(message)
    pytest.skip(message)


@contextlib.contextmanager
def postgres_database(server_url: str) -> Iterator[str]:
    """A new, empty database on the server of `server_url`, dropped afterwards with whatever still holds it."""
    name = f"scalelab_test_{uuid.uuid4().hex[:16]}"
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


@contextlib.contextmanager
def database(kind: str, directory: Path) -> Iterator[str]:
    """The URL of a new, empty database of `kind` (SQLite: a file in `directory`)."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'scalelab.db'}"
        return
    with postgres_database(postgres_or_skip()) as url:
        yield url
