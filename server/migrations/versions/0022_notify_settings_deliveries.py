"""notifications: each user's events and channels, and each delivery queued for them with its attempts

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29

Issue 36 (server/services/notifications.py, server/services/delivery.py): the monitor queues a delivery row in the
transaction of the event it is about (an experiment ended, a run failed or hung, a regression); the delivery loop
sends it and records every attempt. An ended experiment whose owner wants to hear of a regression waits in
`regression_watch` until its runs are read to their end.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notification_settings",
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("email", sqlmodel.sql.sqltypes.AutoString(length=254), nullable=True),
        sa.Column("webhook_url", sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=True),
        sa.Column("user_name", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["user_name"], ["user.name"]),
        sa.PrimaryKeyConstraint("user_name"),
    )
    op.create_table(
        "notification_delivery",
        sa.Column("event", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("channel", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("target", sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
        sa.Column("subject", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("text", sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
        sa.Column("experiment_id", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("next_attempt_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("delivered_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("last_error", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=True),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_name", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.ForeignKeyConstraint(["user_name"], ["user.name"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "regression_watch",
        sa.Column("experiment_id", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("user_name", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiment.id"]),
        sa.ForeignKeyConstraint(["user_name"], ["user.name"]),
        sa.PrimaryKeyConstraint("experiment_id"),
    )
    op.create_index(op.f("ix_notification_delivery_user_name"), "notification_delivery", ["user_name"], unique=False)
    # The delivery loop's question each round: the pending rows that are due.
    op.create_index("ix_notification_delivery_due", "notification_delivery", ["state", "next_attempt_at"])


def downgrade() -> None:
    op.drop_index("ix_notification_delivery_due", table_name="notification_delivery")
    op.drop_index(op.f("ix_notification_delivery_user_name"), table_name="notification_delivery")
    op.drop_table("notification_delivery")
    op.drop_table("notification_settings")
    op.drop_table("regression_watch")
