"""unix users and sharing: user.unix (signs in through PAM), experiment.sharing and experiment.sharing_group

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24

Every existing user is scalelab's own (unix false), and every existing experiment private: sharing is what its
owner chooses from now on. Before this revision everyone signed in saw every experiment; an admin who wants that
back for old experiments sets their sharing to everyone.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("user") as batch:
        batch.add_column(sa.Column("unix", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("experiment") as batch:
        batch.add_column(
            sa.Column("sharing", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False, server_default="private")
        )
        batch.add_column(sa.Column("sharing_group", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("experiment") as batch:
        batch.drop_column("sharing_group")
        batch.drop_column("sharing")
    with op.batch_alter_table("user") as batch:
        batch.drop_column("unix")
