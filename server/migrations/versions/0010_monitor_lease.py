"""lease: the table that chooses the one process running the monitor among several

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24

Several server processes (`python -m server --workers N`, or instances on several hosts) share one database; one of
them at a time follows the jobs, holding the row named "monitor" until it stops renewing it. The row is made by
the first process that asks for it.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lease",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("holder", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("lease")
