"""pinned references and A/A pairs: which experiment is the reference of its spec, which repeat it to measure noise

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29

Issue 35 (server/services/references.py): an experiment pinned as the reference of its spec (the request's fields
that affect timing, its profile and partition, hashed as `spec_key`), or marked as an A/A run of that reference
(`pair_of`), whose ratios to it give the profile's noise floor. One row per experiment; deleting the mark deletes
the row.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reference",
        sa.Column("experiment_id", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("role", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("spec_key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("profile", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("pair_of", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True),
        sa.Column("pinned_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("pinned_by", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiment.id"]),
        sa.PrimaryKeyConstraint("experiment_id"),
    )
    op.create_index(op.f("ix_reference_spec_key"), "reference", ["spec_key"], unique=False)
    op.create_index(op.f("ix_reference_profile"), "reference", ["profile"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_reference_profile"), table_name="reference")
    op.drop_index(op.f("ix_reference_spec_key"), table_name="reference")
    op.drop_table("reference")
