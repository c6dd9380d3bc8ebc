"""run.output_file: which file a run's output offset is into, and the output_refused event

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28

A job only appends to its output.log. One that truncates it, or replaces it with another file, used to make the
monitor walk its offset back a byte per commit, or read the other file at the first one's offsets. The run now keeps
the identity ("device:inode") of the file it read ("refused" once reading stopped), and an event of a new kind says
why a run's output was not read on. Existing runs have none yet: the file found at their next read is theirs.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN, as 0012's and 0013's: a batch would copy the table on SQLite and lose its row_version trigger.
    op.add_column("run", sa.Column("output_file", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        # PostgreSQL keeps the event kinds in a type of its own; SQLite keeps text.
        op.execute("ALTER TYPE runeventkind ADD VALUE IF NOT EXISTS 'output_refused'")


def downgrade() -> None:
    # PostgreSQL cannot drop a value from a type: the kind stays, unused, as an earlier revision would leave it.
    op.execute(sa.text("DELETE FROM runevent WHERE kind = 'output_refused'"))
    op.drop_column("run", "output_file")
