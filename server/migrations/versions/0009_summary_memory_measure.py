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

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runsummary") as batch:
        batch.add_column(sa.Column("peak_memory_kind", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        batch.add_column(sa.Column("peak_rss_bytes", sa.Integer(), nullable=True))
    op.execute(
        """
        UPDATE runsummary SET peak_memory_kind = (
            SELECT json_extract(metric.record, '$.memory_kind') FROM metric
            WHERE metric.run_id = runsummary.run_id AND metric.kind IN ('epoch', 'inference') AND metric.counts
            ORDER BY metric."offset" DESC LIMIT 1
        )
        """
    )


def downgrade() -> None:
    with op.batch_alter_table("runsummary") as batch:
        batch.drop_column("peak_rss_bytes")
        batch.drop_column("peak_memory_kind")
