"""The schema comes from migrations, and they describe exactly the models."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlmodel import SQLModel

from server.db import MIGRATIONS, alembic_config, init_db, make_engine

HEAD = ScriptDirectory(str(MIGRATIONS)).get_current_head()


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
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == HEAD


def test_upgrade_from_the_first_schema_keeps_runs_and_metrics(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0001")
        connection.execute(
            text("INSERT INTO experiment (id, name, created_at, request) VALUES ('e1', 'x', '2026-01-01', '{}')")
        )
        for run_id, job_id in (("r1", "41"), ("r2", None)):
            connection.execute(
                text(
                    "INSERT INTO run (id, experiment_id, position, state, job_id, scheduler, run_dir, created_at, "
                    "spec, log_offset, ingest_done, parse_errors) VALUES "
                    "(:id, 'e1', 0, 'COMPLETED', :job, 'slurm', '/r', '2026-01-01', '{}', 7, 1, 0)"
                ),
                {"id": run_id, "job": job_id},
            )
        connection.execute(
            text("INSERT INTO metric (run_id, offset, kind, record) VALUES ('r1', 0, 'start', '{\"v\": 1}')")
        )
    init_db(engine)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT id, state, attempt, waiting, log_offset FROM run ORDER BY id")).all()
        assert [tuple(row) for row in rows] == [("r1", "COMPLETED", 1, 0, 7), ("r2", "COMPLETED", 0, 0, 7)]
        assert connection.execute(text("SELECT count(*) FROM metric")).scalar_one() == 1


def test_sqlite_runs_in_wal_mode(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
        assert connection.execute(text("PRAGMA foreign_keys")).scalar_one() == 1
