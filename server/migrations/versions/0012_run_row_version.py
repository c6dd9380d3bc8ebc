"""run.row_version: a number the database itself bumps on every change of a run's row

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25

What the server keeps of a run's answers (its JSON, a list of runs, a row of the runs page) was keyed by every
column of the row as read: each list read 30 columns of 100 rows, spec included, to look its pieces up, which was
most of what a kept list still cost. Keyed by (id, row_version) instead, a list reads two columns. A trigger bumps
the number on every UPDATE, whoever writes it (the ORM, a set-based update, another server process, an admin's
SQL), so no code path can forget it and a key still holds what its piece was made from.

A later migration that alters `run` through a batch on SQLite copies the table and loses the trigger: it must
create it again (`create_trigger` below); tests/server/test_db.py checks that the head schema bumps the number.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# SQLite's trigger runs after the row's update and updates it once more; the WHEN keeps that second update (and
# any update that sets the number itself) from bumping again, were recursive triggers ever turned on.
SQLITE_TRIGGER = """
CREATE TRIGGER run_row_version AFTER UPDATE ON run FOR EACH ROW WHEN NEW.row_version = OLD.row_version
BEGIN
    UPDATE run SET row_version = OLD.row_version + 1 WHERE id = OLD.id;
END
"""
# PostgreSQL's sets the number in the row being written, before it is written.
POSTGRES_FUNCTION = """
CREATE FUNCTION run_row_version_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.row_version := OLD.row_version + 1;
    RETURN NEW;
END
$$
"""
POSTGRES_TRIGGER = (
    "CREATE TRIGGER run_row_version BEFORE UPDATE ON run FOR EACH ROW EXECUTE FUNCTION run_row_version_bump()"
)


def create_trigger() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(POSTGRES_FUNCTION)
        op.execute(POSTGRES_TRIGGER)
    else:
        op.execute(SQLITE_TRIGGER)


def upgrade() -> None:
    # A plain ADD COLUMN: SQLite adds a column with a default in place, where a batch would copy the table.
    op.add_column("run", sa.Column("row_version", sa.Integer(), nullable=False, server_default="0"))
    create_trigger()


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP TRIGGER run_row_version ON run")
        op.execute("DROP FUNCTION run_row_version_bump()")
    else:
        op.execute("DROP TRIGGER run_row_version")
    with op.batch_alter_table("run") as batch:
        batch.drop_column("row_version")
