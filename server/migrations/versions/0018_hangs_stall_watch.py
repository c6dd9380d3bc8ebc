"""hang watchdog: when a run's recent records arrived, when it was found stalled, and the events of a stall

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29

A live run is stalled once it prints no record for longer than a bound that follows its own pace (issue 34;
server/services/stalls.py): `record_arrivals` keeps when the monitor stored its latest few records (the server's
clock, a JSON list of seconds), `stalled_at` when it was found stalled and its ranks asked for their stacks,
`stall_judged` whether those stacks were read and the verdict given. The events `stalled` and `hang_cancelled`.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # PostgreSQL keeps the kinds in a type of its own (as 0015 did); SQLite keeps text.
        op.execute("ALTER TYPE runeventkind ADD VALUE IF NOT EXISTS 'stalled'")
        op.execute("ALTER TYPE runeventkind ADD VALUE IF NOT EXISTS 'hang_cancelled'")
    # Plain ADD COLUMNs, as 0012's: a batch would copy the table on SQLite and lose its row_version trigger.
    op.add_column("run", sa.Column("record_arrivals", sa.JSON(), nullable=True))
    op.add_column("run", sa.Column("stalled_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
    op.add_column("run", sa.Column("stall_judged", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    # PostgreSQL cannot drop a value of a type, and a kind unused is harmless.
    op.drop_column("run", "stall_judged")
    op.drop_column("run", "stalled_at")
    op.drop_column("run", "record_arrivals")
