"""scaling cards: where an experiment imported from a card came from

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29

An experiment brought in from another instance's scaling card (POST /api/cards, issue 35) is read-only and says
where it came from: the URL and name of the instance that exported it, the experiment's id there, the card's
content hash and format, who exported it and when, and who imported it here and when. A table of its own, one row
per imported experiment, rather than columns every experiment would carry empty.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text = sqlmodel.sql.sqltypes.AutoString
    op.create_table(
        "card_origin",
        sa.Column("experiment_id", text(length=16), sa.ForeignKey("experiment.id"), primary_key=True),
        sa.Column("url", text(length=4096), nullable=True),
        sa.Column("instance", text(length=4096), nullable=True),
        sa.Column("original_id", text(length=4096), nullable=False),
        sa.Column("content_hash", text(length=80), nullable=False),
        sa.Column("card_version", sa.Integer(), nullable=False),
        sa.Column("exported_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("exported_by", text(length=4096), nullable=True),
        sa.Column("imported_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("imported_by", text(length=64), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("card_origin")
