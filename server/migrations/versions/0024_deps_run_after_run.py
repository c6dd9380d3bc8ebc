"""dependencies: the training run an inference run waits for in Slurm

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29

Issue 36 (server/services/dependencies.py): an inference experiment may name a training run that has not ended;
its runs' jobs are submitted at once with --dependency=afterok on that run's job. `after_run` names the training
run and `after_job` its job, so that the run's reason can say what it waits for, the monitor can end the runs
whose training failed, and a resubmission can tell whether its script still waits for the training's job.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN, as 0018's: a batch would copy the table on SQLite and lose its row_version trigger.
    op.add_column("run", sa.Column("after_run", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True))
    op.add_column("run", sa.Column("after_job", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True))
    op.create_index(op.f("ix_run_after_run"), "run", ["after_run"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_run_after_run"), table_name="run")
    op.drop_column("run", "after_job")
    op.drop_column("run", "after_run")
