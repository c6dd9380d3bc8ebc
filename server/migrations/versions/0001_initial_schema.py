"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

from server.models.common import BIG_INTEGER

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "experiment",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "run",
        sa.Column("experiment_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "created",
                "submitted",
                "pending",
                "running",
                "completed",
                "failed",
                "cancelled",
                "timeout",
                "node_fail",
                "out_of_memory",
                "submit_failed",
                name="runstate",
            ),
            nullable=False,
        ),
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("scheduler", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("scheduler_state", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("scheduler_reason", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("exit_code", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("message", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("run_dir", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("submitted_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("started_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("ended_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("log_offset", BIG_INTEGER, nullable=False),
        sa.Column("ingest_done", sa.Boolean(), nullable=False),
        sa.Column("parse_errors", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiment.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_experiment_id"), ["experiment_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_run_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_run_state"), ["state"], unique=False)

    op.create_table(
        "metric",
        sa.Column("id", BIG_INTEGER, nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("offset", BIG_INTEGER, nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=True),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["run.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "offset"),
    )
    with op.batch_alter_table("metric", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_metric_run_id"), ["run_id"], unique=False)

    op.create_table(
        "runsummary",
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=True),
        sa.Column("device", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("epochs_done", sa.Integer(), nullable=False),
        sa.Column("first_epoch_time_s", sa.Float(), nullable=True),
        sa.Column("epoch_time_sum_s", sa.Float(), nullable=False),
        sa.Column("last_train_loss", sa.Float(), nullable=True),
        sa.Column("last_val_loss", sa.Float(), nullable=True),
        sa.Column("last_val_accuracy", sa.Float(), nullable=True),
        sa.Column("last_samples_per_s", sa.Float(), nullable=True),
        sa.Column("peak_memory_bytes", BIG_INTEGER, nullable=True),
        sa.Column("total_time_s", sa.Float(), nullable=True),
        sa.Column("end_status", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["run.id"],
        ),
        sa.PrimaryKeyConstraint("run_id"),
    )


def downgrade() -> None:
    op.drop_table("runsummary")
    with op.batch_alter_table("metric", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_metric_run_id"))

    op.drop_table("metric")
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_state"))
        batch_op.drop_index(batch_op.f("ix_run_job_id"))
        batch_op.drop_index(batch_op.f("ix_run_experiment_id"))

    op.drop_table("run")
    op.drop_table("experiment")
