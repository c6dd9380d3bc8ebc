"""failure kinds: why a run that did not complete ended, and the evidence

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29

A failed run is classified (issue 34): hung, out of memory, a collective's timeout, a node's failure, the time
limit, an import error, a program error, the launcher's error; `failure_detail` quotes the evidence and says what to
do. Indexed: the experiment page counts a grid's failures by kind, and "rerun the failed" filters on it.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs, as 0012's: a batch would copy the table on SQLite and lose its row_version trigger. Text,
    # not a type of PostgreSQL's own: a kind added later needs no migration.
    op.add_column("run", sa.Column("failure_kind", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True))
    op.add_column("run", sa.Column("failure_detail", sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=True))
    op.create_index("ix_run_failure_kind", "run", ["failure_kind"])


def downgrade() -> None:
    op.drop_index("ix_run_failure_kind", table_name="run")
    op.drop_column("run", "failure_detail")
    op.drop_column("run", "failure_kind")
