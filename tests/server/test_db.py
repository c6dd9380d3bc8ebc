"""The schema comes from migrations, and they describe exactly the models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlmodel import SQLModel

from server.db import init_db, make_engine


def test_migrations_match_the_models(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    init_db(engine)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
    assert differences == [], "add a migration: server/migrations/versions"


def test_upgrade_is_idempotent_and_keeps_data(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    init_db(engine)
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO experiment (id, name, created_at, request) VALUES ('e1', 'x', '2026-01-01', '{}')")
        )
    init_db(engine)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT name FROM experiment")).scalar_one() == "x"
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "0001"


def test_sqlite_runs_in_wal_mode(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
        assert connection.execute(text("PRAGMA foreign_keys")).scalar_one() == 1
