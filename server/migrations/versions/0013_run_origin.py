"""run.origin: whether scalelab submitted the run or imported it from a log, apart from the backend of its job

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26

`run.scheduler` said both which backend a run's job went to (slurm, slurmrestd, pyslurm, local) and, as "import",
that the run had no job at all: what may be done to a run was read from a backend's name. The origin is a column of
its own now; existing runs are "submitted", but for those whose scheduler says "import". An imported run's
scheduler still says "import", as the API always showed it.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN, as 0012's: SQLite adds a column with a constant default in place, where a batch would copy
    # the table and lose its row_version trigger.
    op.add_column(
        "run",
        sa.Column("origin", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False, server_default="submitted"),
    )
    run = sa.table("run", sa.column("scheduler", sa.String), sa.column("origin", sa.String))
    op.execute(run.update().where(run.c.scheduler == "import").values(origin="imported"))


def downgrade() -> None:
    # DROP COLUMN in place on both databases (SQLite since 3.35), for the same reason.
    op.drop_column("run", "origin")
