"""scaling card fabric: the band a pre-flight was judged against, and the fabric an imported card's runs carry

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29

A pre-flight's fabric_degraded verdict rests on a band (the profile's fabric_reference, or the spread of earlier
probes of its shape) that neither the run's records nor a scaling card held, so a card could not draw the verdict
again: fabricprobe.expected keeps the band it was judged against (JSON: basis, low and high bytes/s, source). Rows
judged before keep none. card_fabric keeps, per run imported from a card, the fabric the card carries (the fits its
prediction read, its pre-flights' bands and verdicts), apart from this instance's own fabric store.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN, as 0018's: a batch would copy the table on SQLite.
    op.add_column("fabricprobe", sa.Column("expected", sa.JSON(), nullable=True))
    op.create_table(
        "card_fabric",
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=16), sa.ForeignKey("run.id"), primary_key=True),
        sa.Column("fabric", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("card_fabric")
    op.drop_column("fabricprobe", "expected")
