"""cluster profiles, run events, concurrency limits, the preempted state

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_STATES = (
    "created", "submitted", "pending", "running", "completed", "failed", "cancelled", "timeout", "node_fail",
    "out_of_memory",
)  # fmt: skip
OLD_STATE = sa.Enum(*_STATES, "submit_failed", name="runstate")
NEW_STATE = sa.Enum(*_STATES, "preempted", "submit_failed", name="runstate")
EVENT_KIND = sa.Enum(
    "submitted", "submit_failed", "state", "requeued", "cancel_requested", "resubmitted", "reconciled",
    name="runeventkind",
)  # fmt: skip


def upgrade() -> None:
    op.create_table(
        "runevent",
        sa.Column("at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("kind", EVENT_KIND, nullable=False),
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("state", NEW_STATE, nullable=True),
        sa.Column("scheduler_state", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("detail", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("runevent", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runevent_run_id"), ["run_id"], unique=False)

    with op.batch_alter_table("experiment", schema=None) as batch_op:
        batch_op.add_column(sa.Column("max_concurrent", sa.Integer(), nullable=True))

    if op.get_bind().dialect.name == "postgresql":
        # PostgreSQL keeps the states in a type of its own, which altering the column leaves as it was; SQLite
        # keeps text. No construct of the query builder alters a type.
        op.execute("ALTER TYPE runstate ADD VALUE IF NOT EXISTS 'preempted' BEFORE 'submit_failed'")
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.alter_column("state", existing_type=OLD_STATE, type_=NEW_STATE, existing_nullable=False)
        batch_op.add_column(sa.Column("profile", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        # Runs from before: submitted once if they have a job.
        batch_op.add_column(sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("waiting", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.create_index(batch_op.f("ix_run_waiting"), ["waiting"], unique=False)
    op.execute("UPDATE run SET attempt = 1 WHERE job_id IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_waiting"))
        batch_op.drop_column("waiting")
        batch_op.drop_column("attempt")
        batch_op.drop_column("profile")
        batch_op.alter_column("state", existing_type=NEW_STATE, type_=OLD_STATE, existing_nullable=False)

    with op.batch_alter_table("experiment", schema=None) as batch_op:
        batch_op.drop_column("max_concurrent")

    with op.batch_alter_table("runevent", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runevent_run_id"))

    op.drop_table("runevent")
