"""run provenance: the image, its digest, the worker and torch versions, the source revision; reruns

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_COLUMNS = ("image", "image_digest", "worker_version", "torch_version", "source_revision", "rerun_of")


def upgrade() -> None:
    with op.batch_alter_table("run") as batch:
        for name in _COLUMNS:
            batch.add_column(sa.Column(name, sqlmodel.sql.sqltypes.AutoString(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run") as batch:
        for name in reversed(_COLUMNS):
            batch.drop_column(name)
