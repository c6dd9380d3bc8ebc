"""metric.counts: ingestion's verdict on which records count after a start or a resume of the worker

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

The records already stored get their verdicts by replaying each run's history through ingestion's own rule
(server.services.ingestion.counting), not through a copy of it kept here. A migration usually carries its own
logic so that a later change of the application cannot change what an old migration does; here that is the point:
the column holds the rule's verdict, and two definitions of the rule are what this revision removes (a frozen copy
would be a third, free to disagree with the one that fills every new record). The function is pure (no session, no
model), so its use here cannot drift with the tables; a later change of the rule needs a migration of its own that
fills the column again, and a move of the function breaks this import on every new database, tests included, at
once rather than silently.
"""

from __future__ import annotations

from itertools import groupby
from operator import itemgetter

import sqlalchemy as sa
from alembic import op

from server.services.ingestion.counting import PLACED_KINDS, RULE_KINDS, counting, place_of

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# The table as this revision knows it, not the model, which may have moved on.
_metric = sa.table(
    "metric",
    sa.column("id", sa.Integer),
    sa.column("run_id", sa.String),
    sa.column("offset", sa.Integer),
    sa.column("kind", sa.String),
    sa.column("epoch", sa.Integer),
    sa.column("record", sa.JSON),
    sa.column("counts", sa.Boolean),
)


def upgrade() -> None:
    # Every record counts until the rule says otherwise: kinds it does not read keep the default for good.
    with op.batch_alter_table("metric") as batch:
        batch.add_column(sa.Column("counts", sa.Boolean(), nullable=False, server_default=sa.true()))
    connection = op.get_bind()
    # Only the kinds the rule reads: the step records, most of a history, are neither read nor written.
    rows = connection.execute(
        sa.select(_metric.c.run_id, _metric.c.id, _metric.c.offset, _metric.c.kind, _metric.c.epoch, _metric.c.record)
        .where(_metric.c.kind.in_(sorted(RULE_KINDS)))
        .order_by(_metric.c.run_id, _metric.c.offset)
    )
    dropped: list[dict[str, int]] = []
    for _run_id, rows_of_run in groupby(rows, key=itemgetter(0)):
        ids: dict[int, int] = {}
        history = []
        for _, metric_id, offset, kind, epoch, record in rows_of_run:
            ids[offset] = metric_id
            history.append((offset, place_of(kind, epoch, record)))
        kept = counting(history)
        # Start and resume records are not placed: they count, as the records of the kinds the rule does not read.
        dropped += [
            {"metric_id": ids[offset]} for offset, place in history if place.kind in PLACED_KINDS and offset not in kept
        ]
    if dropped:
        connection.execute(
            sa.update(_metric).where(_metric.c.id == sa.bindparam("metric_id")).values(counts=False), dropped
        )


def downgrade() -> None:
    with op.batch_alter_table("metric") as batch:
        batch.drop_column("counts")
