"""run_summary.peak_memory_kind and peak_rss_bytes: what the run's peak memory measures, and its resident set

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24

On the CPU, peak memory was each process's resident set; it is now what the tensors held, with the resident set
beside it. The summary keeps the label, so that the dashboard says which measure each run's figure is. Existing
summaries take the label their run's latest counted epoch (or inference) record printed; their resident set was
not printed apart, so it stays unknown.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

from server.models.common import BIG_INTEGER

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runsummary") as batch:
        batch.add_column(sa.Column("peak_memory_kind", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        batch.add_column(sa.Column("peak_rss_bytes", BIG_INTEGER, nullable=True))
    # The query builder, not SQL text: SQLite and PostgreSQL read a JSON field with different functions.
    metric = sa.table(
        "metric",
        sa.column("run_id", sa.String),
        sa.column("kind", sa.String),
        sa.column("counts", sa.Boolean),
        sa.column("offset", sa.Integer),
        sa.column("record", sa.JSON),
    )
    summary = sa.table("runsummary", sa.column("run_id", sa.String), sa.column("peak_memory_kind", sa.String))
    latest_kind = (
        sa.select(metric.c.record["memory_kind"].as_string())
        .where(metric.c.run_id == summary.c.run_id, metric.c.kind.in_(["epoch", "inference"]), metric.c.counts)
        .order_by(metric.c.offset.desc())
        .limit(1)
        .scalar_subquery()
    )
    op.execute(summary.update().values(peak_memory_kind=latest_kind))


def downgrade() -> None:
    with op.batch_alter_table("runsummary") as batch:
        batch.drop_column("peak_rss_bytes")
        batch.drop_column("peak_memory_kind")
