"""The database engine: SQLite in WAL mode by default, so readers never wait for the monitor's writes; or
PostgreSQL (postgresql+psycopg://...), for a shared instance with several server processes.

Every difference between the two lives here: SQLite's pragmas and pool, PostgreSQL's connection checks, and which
errors mean that the database cannot be reached just now."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, ExceptionContext, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError
from sqlmodel import Session, create_engine

from server import models  # noqa: F401  (registers the tables on SQLModel.metadata)

log = logging.getLogger(__name__)

# Seconds a writer waits for another writer before SQLite gives up with "database is locked".
BUSY_TIMEOUT_MS = 30_000
# Connections a server process may hold at once: one per request thread (the thread pool has 40) and the monitor's.
# The default pool of 5 + 10 made requests under load wait 30 s for a connection, then fail with a 500, on SQLite
# and on PostgreSQL alike.
POOL_SIZE = 50
# Of those, the ones PostgreSQL keeps open while idle (each is a server process there): the rest are closed on return.
POSTGRES_IDLE_CONNECTIONS = 10
# Seconds to wait for PostgreSQL to accept a connection.
CONNECT_TIMEOUT_S = 5


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")  # durable at each checkpoint; WAL keeps the file consistent
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


_SUPPORTED = "sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE"
# SQLSTATEs of a PostgreSQL that is going away or not yet back: class 08 (connection exceptions), and an
# administrator's shutdown, a crash shutdown, or a server still starting.
_POSTGRES_GONE = ("08", "57P01", "57P02", "57P03")


def _postgres_gone(orig: BaseException) -> bool:
    """PostgreSQL is going away, not yet back, or could not be reached at all."""
    state = getattr(orig, "sqlstate", None)
    if isinstance(state, str):
        return state.startswith(_POSTGRES_GONE)
    # No SQLSTATE: the client could not reach the server at all (refused, reset, timed out).
    return type(orig).__module__.startswith("psycopg") and type(orig).__name__ == "OperationalError"


def database_unavailable(exc: DBAPIError | DisconnectionError) -> bool:
    """The database cannot be reached just now (restarted, down, or SQLite locked beyond the busy timeout): asking
    again later may succeed, and the failed transaction wrote nothing."""
    if isinstance(exc, DisconnectionError):  # the pool threw the connection away (another one was found dead)
        return True
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if orig is not None and type(orig).__module__.startswith("psycopg"):
        return _postgres_gone(orig)
    return "database is locked" in str(orig)


def _treat_as_disconnect(context: ExceptionContext) -> None:
    # SQLAlchemy does not count an administrator's shutdown (57P01) as a lost connection: such a connection went
    # back to the pool and failed again, even at the rollback that ends a request. Counted, it is thrown away, with
    # the rest of the pool, and the next checkout connects anew.
    if not context.is_disconnect and _postgres_gone(context.original_exception):
        context.is_disconnect = True


def supported_url(url: str) -> str:
    """The URL, with PostgreSQL's driver named where it is not; refused where the database is not one of the two."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValueError(f"SCALELAB_DATABASE_URL is not a database URL: {_SUPPORTED}") from None
    if parsed.drivername in ("postgresql", "postgres"):
        # SQLAlchemy's default driver for PostgreSQL is psycopg2, which scalelab does not install.
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    if parsed.drivername not in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg"):
        raise ValueError(f"SCALELAB_DATABASE_URL names {parsed.drivername!r}; scalelab supports {_SUPPORTED}")
    return url


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        # pre_ping: a connection the pool kept across a database restart is replaced at checkout, not handed to a
        # request that would fail on it. connect_timeout: while the database is down, a request fails in seconds.
        engine = create_engine(
            url,
            pool_pre_ping=True,
            connect_args={"connect_timeout": CONNECT_TIMEOUT_S},
            pool_size=POSTGRES_IDLE_CONNECTIONS,
            max_overflow=POOL_SIZE - POSTGRES_IDLE_CONNECTIONS,
        )
        event.listen(engine, "handle_error", _treat_as_disconnect)
        return engine
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
        # A SQLite connection is a file handle, so none is ever refused: writers queue on SQLite's own lock
        # (busy_timeout) instead.
        pool_size=POOL_SIZE,
        max_overflow=-1,
    )
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def init_db(engine: Engine) -> None:
    """Bring the schema to the newest migration, all of it in one transaction: a process killed halfway leaves the
    schema as it was, and the next start upgrades it again. A new database is created by the same path."""
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as connection:
        if sqlite:
            # SQLite alters a table by copying it to a new one, which other tables' foreign keys would forbid.
            # The pragma only takes effect outside a transaction; the check below keeps the keys honest.
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        with connection.begin():
            if sqlite:
                # Python's sqlite3 opens a transaction only before INSERT/UPDATE/DELETE, so CREATE, ALTER and DROP
                # ran each on its own: a kill mid-upgrade left half a migration behind, which the next start could
                # not redo ("duplicate column"). Opened by hand, the transaction holds them too; the commit ends it.
                connection.exec_driver_sql("BEGIN")
            command.upgrade(alembic_config(connection), "head")
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                if broken:
                    raise RuntimeError(f"the migration left rows pointing nowhere: {broken[:5]}")
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
            connection.commit()


def close_quietly(session: Session) -> None:
    """Close a session whatever became of its database: a request's session is closed after its answer has
    started, where an error would cut the answer short, and a connection the database dropped (restarted) leaves
    nothing to roll back."""
    try:
        session.close()
    except (DBAPIError, DisconnectionError) as exc:
        if not database_unavailable(exc):
            raise
        log.warning("the database went away under a request's session: %r", exc)
