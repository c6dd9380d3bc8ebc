"""token expiry and makers, and failed sign-ins: apitoken.expires_at and apitoken.parent_id, table signinfailures

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27

A token may now end by itself (`expires_at`), and one made by another token's request records that token
(`parent_id`): it is revoked with it and never outlives it. Existing tokens keep no expiry and no maker.
`signinfailures` counts failed password sign-ins per account name and per client address, in the database so
that every server process throttles against the same count.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_TEXT = sqlmodel.sql.sqltypes.AutoString
_TIME = sqlmodel.sql.sqltypes.UTCDateTime


def upgrade() -> None:
    # Plain ADD COLUMNs of nullable columns: in place on both databases, no copy of the table.
    op.add_column("apitoken", sa.Column("expires_at", _TIME(), nullable=True))
    op.add_column("apitoken", sa.Column("parent_id", _TEXT(length=16), nullable=True))
    op.create_index("ix_apitoken_parent_id", "apitoken", ["parent_id"], unique=False)
    op.create_table(
        "signinfailures",
        sa.Column("key", _TEXT(length=80), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("window_ends", _TIME(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )


def downgrade() -> None:
    op.drop_table("signinfailures")
    op.drop_index("ix_apitoken_parent_id", table_name="apitoken")
    op.drop_column("apitoken", "parent_id")
    op.drop_column("apitoken", "expires_at")
