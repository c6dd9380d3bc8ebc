"""metric: no index on run_id alone; the unique (run_id, offset) key serves every query by run

Revision ID: 0011
Revises: 0009
Create Date: 2026-11-24

Each record written updated both indexes, and the unique key's own index starts with run_id, so it answers
every lookup the lone index did (a run's records, in output order). Ingestion writes one row per printed line: one
index fewer is a fifth less work per row in SQLite.
"""

from __future__ import annotations

from alembic import op

revision = "0011"
# 0010 is the monitor's lease table, on another branch: renumber at the merge.
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_metric_run_id", table_name="metric")


def downgrade() -> None:
    op.create_index("ix_metric_run_id", "metric", ["run_id"])
