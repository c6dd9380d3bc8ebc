"""users, API tokens, browser sessions; owners of experiments and runs

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TEXT = sqlmodel.sql.sqltypes.AutoString
_TIME = sqlmodel.sql.sqltypes.UTCDateTime


def upgrade() -> None:
    op.create_table(
        "user",
        sa.Column("name", _TEXT(length=32), nullable=False),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("slurm_account", _TEXT(length=64), nullable=True),
        sa.Column("max_concurrent_runs", sa.Integer(), nullable=True),
        sa.Column("max_gpus_in_use", sa.Integer(), nullable=True),
        sa.Column("max_runs_per_day", sa.Integer(), nullable=True),
        sa.Column("created_at", _TIME(), nullable=False),
        sa.Column("revoked_at", _TIME(), nullable=True),
        sa.Column("password_hash", _TEXT(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "apitoken",
        sa.Column("id", _TEXT(length=16), nullable=False),
        sa.Column("user_name", _TEXT(), nullable=False),
        sa.Column("token_hash", _TEXT(length=64), nullable=False),
        sa.Column("created_at", _TIME(), nullable=False),
        sa.Column("last_used_at", _TIME(), nullable=True),
        sa.Column("revoked_at", _TIME(), nullable=True),
        sa.ForeignKeyConstraint(["user_name"], ["user.name"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("apitoken", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_apitoken_user_name"), ["user_name"], unique=False)
    op.create_table(
        "websession",
        sa.Column("id_hash", _TEXT(length=64), nullable=False),
        sa.Column("user_name", _TEXT(), nullable=False),
        sa.Column("csrf_token", _TEXT(length=64), nullable=False),
        sa.Column("created_at", _TIME(), nullable=False),
        sa.Column("expires_at", _TIME(), nullable=False),
        sa.ForeignKeyConstraint(["user_name"], ["user.name"]),
        sa.PrimaryKeyConstraint("id_hash"),
    )
    with op.batch_alter_table("websession", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_websession_user_name"), ["user_name"], unique=False)
    # Experiments and runs from before have no owner: only admins may change them.
    for table in ("experiment", "run"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("owner", _TEXT(), nullable=True))
            batch_op.create_index(batch_op.f(f"ix_{table}_owner"), ["owner"], unique=False)
            batch_op.create_foreign_key(f"fk_{table}_owner_user", "user", ["owner"], ["name"])


def downgrade() -> None:
    for table in ("run", "experiment"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(f"fk_{table}_owner_user", type_="foreignkey")
            batch_op.drop_index(batch_op.f(f"ix_{table}_owner"))
            batch_op.drop_column("owner")
    with op.batch_alter_table("websession", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_websession_user_name"))
    op.drop_table("websession")
    with op.batch_alter_table("apitoken", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_apitoken_user_name"))
    op.drop_table("apitoken")
    op.drop_table("user")
