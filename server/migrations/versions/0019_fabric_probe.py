"""fabric probe: each probed tier of a run (a probe run's or a training run's pre-flight), by shape, with its points
and its latency-bandwidth fit

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29

One row per run, tier and pre-flight mark (issue 33; server/services/fabric.py): the shape it measured (profile,
partition, nodes, processes per node, backend, tier), the points of its curve as JSON (collective, ranks, nbytes,
seconds each), the fit, and a pre-flight's fabric_degraded verdict; and the partition each run was rendered for
(run.partition), which the shape needs. Rows come from runs ingested from now on; earlier runs printed no fabric
records.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fabricprobe",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("profile", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("partition", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("processes_per_node", sa.Integer(), nullable=False),
        sa.Column("backend", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("tier", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("ranks", sa.Integer(), nullable=False),
        sa.Column("preflight", sa.Boolean(), nullable=False),
        sa.Column("alpha_s", sa.Float(), nullable=False),
        sa.Column("beta_bytes_per_s", sa.Float(), nullable=False),
        sa.Column("points", sa.JSON(), nullable=False),
        sa.Column("measured_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("degraded", sqlmodel.sql.sqltypes.AutoString(length=1000), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "tier", "preflight"),
    )
    op.create_index("ix_fabricprobe_run_id", "fabricprobe", ["run_id"])
    # A plain ADD COLUMN, as 0018's: a batch would copy the table on SQLite and lose its row_version trigger.
    op.add_column("run", sa.Column("partition", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
    op.create_index("ix_fabricprobe_shape", "fabricprobe", ["profile", "partition", "backend", "tier"])


def downgrade() -> None:
    op.drop_column("run", "partition")
    op.drop_index("ix_fabricprobe_shape", table_name="fabricprobe")
    op.drop_index("ix_fabricprobe_run_id", table_name="fabricprobe")
    op.drop_table("fabricprobe")
