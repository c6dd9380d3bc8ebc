"""run accounting: what Slurm's accounting says each ended run used, and which jobs shared its nodes; run.nodes

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

Runs that ended before this revision get no accounting row: their nodes were never recorded, and the service
asks only about runs that end from now on (a run without a row shows its figures as not gathered).
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

from server.models.common import BIG_INTEGER

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runaccounting",
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("nodes", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("start", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("end", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("elapsed_s", sa.Integer(), nullable=True),
        sa.Column("alloc_cpus", sa.Integer(), nullable=True),
        sa.Column("total_cpu_s", sa.Float(), nullable=True),
        sa.Column("cpu_efficiency", sa.Float(), nullable=True),
        sa.Column("max_rss_bytes", BIG_INTEGER, nullable=True),
        sa.Column("gpu_util", sa.Float(), nullable=True),
        sa.Column("gpu_mem_bytes", BIG_INTEGER, nullable=True),
        sa.Column("energy_j", BIG_INTEGER, nullable=True),
        sa.Column("shared_with", sa.JSON(), nullable=False),
        sa.Column("not_gathered", sa.JSON(), nullable=False),
        sa.Column("message", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("accounted_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"]),
        sa.PrimaryKeyConstraint("run_id"),
    )
    with op.batch_alter_table("run") as batch:
        batch.add_column(sa.Column("nodes", sqlmodel.sql.sqltypes.AutoString(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.drop_column("nodes")
    op.drop_table("runaccounting")
