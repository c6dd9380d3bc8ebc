"""indexes for the newest-first lists of runs and experiments

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The runs lists' own order (created_at newest first, then grid position), so a page reads its rows in order.
    op.create_index("ix_run_listing", "run", [sa.text("created_at DESC"), "position"])
    op.create_index("ix_experiment_created_at", "experiment", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_experiment_created_at", table_name="experiment")
    op.drop_index("ix_run_listing", table_name="run")
