"""bounded ingestion: a run's first unreadable line, why its reading stopped, its records read; the event of a stop

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27

A job's output is untrusted (issue 30): a run whose output cannot be stored, or that reaches the per-run limit of
records or bytes, is read no further; `ingest_stopped` says why, an `ingest_stopped` event says when and at which
byte. `first_parse_error` keeps the reason of the first unreadable metric line for the run's owner. `records_read`
counts the run's stored records against the limit; existing runs start from what they have stored.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # PostgreSQL keeps the kinds in a type of its own (as 0002 did for the states); SQLite keeps text.
        op.execute("ALTER TYPE runeventkind ADD VALUE IF NOT EXISTS 'ingest_stopped'")
    # Plain ADD COLUMNs, as 0012's: a batch would copy the table on SQLite and lose its row_version trigger.
    op.add_column("run", sa.Column("first_parse_error", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=True))
    op.add_column("run", sa.Column("ingest_stopped", sqlmodel.sql.sqltypes.AutoString(length=1000), nullable=True))
    op.add_column(
        "run",
        sa.Column(
            "records_read", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False, server_default="0"
        ),
    )
    op.execute(
        "UPDATE run SET records_read = (SELECT count(*) FROM metric WHERE metric.run_id = run.id) "
        "WHERE EXISTS (SELECT 1 FROM metric WHERE metric.run_id = run.id)"
    )


def downgrade() -> None:
    # DROP COLUMN in place on both databases (SQLite since 3.35); PostgreSQL cannot drop a value of a type, and a
    # kind unused is harmless.
    op.drop_column("run", "records_read")
    op.drop_column("run", "ingest_stopped")
    op.drop_column("run", "first_parse_error")
