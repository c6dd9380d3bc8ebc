"""The database engine: SQLite in WAL mode by default, so readers never wait for the monitor's writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlmodel import Session, create_engine

from server import models  # noqa: F401  (registers the tables on SQLModel.metadata)

# Seconds a writer waits for another writer before SQLite gives up with "database is locked".
BUSY_TIMEOUT_MS = 30_000
SQLITE_POOL_SIZE = 50


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")  # durable at each checkpoint; WAL keeps the file consistent
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
        # One connection per request thread (the server's thread pool has 40) and the monitor's: the default pool
        # of 5 + 10 made requests under load wait 30 s for a connection, then fail with a 500. A SQLite connection
        # is a file handle, so none is ever refused: writers queue on SQLite's own lock (busy_timeout) instead.
        pool_size=SQLITE_POOL_SIZE,
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
    """Bring the schema to the newest migration; a new database is created by the same path."""
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as connection:
        if sqlite:
            # SQLite alters a table by copying it to a new one, which other tables' foreign keys would forbid.
            # The pragma only takes effect outside a transaction; the check below keeps the keys honest.
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        with connection.begin():
            command.upgrade(alembic_config(connection), "head")
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                if broken:
                    raise RuntimeError(f"the migration left rows pointing nowhere: {broken[:5]}")
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
            connection.commit()


def sessions(engine: Engine) -> Iterator[Session]:
    with Session(engine) as session:
        yield session
