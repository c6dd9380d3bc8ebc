"""plans: the experiment of a plan's probes and 1-process runs, and the request it plans for

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29

A plan (POST /api/plans, issue 33) is an experiment of its own (its fabric probes and one 1-process run per
strategy) with a row here saying what it is a plan for: the request's grid as it expanded, and the goal its
recommendation serves. A table of its own, one row per plan, rather than columns every experiment would carry empty.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text = sqlmodel.sql.sqltypes.AutoString
    op.create_table(
        "experiment_plan",
        sa.Column("experiment_id", text(length=16), sa.ForeignKey("experiment.id"), primary_key=True),
        sa.Column("goal", text(length=32), nullable=False),
        sa.Column("efficiency", sa.Float(), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("specs", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("experiment_plan")
