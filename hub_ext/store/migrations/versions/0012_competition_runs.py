"""Competition runs: notebooks submitted to a competition run as jobs, teachers' scoring scripts
(issue 34).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04

A competition gains ``runner`` (how submitted notebooks run: profile, limits, the predictions
file's name) and ``scorer`` (a teacher's scoring script: where it is kept, its direction); a
submission gains its kind, its state (pending, scored, failed), the sentence of a failure and the
bookkeeping of its jobs. Existing rows were scored uploads: their defaults say so.

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("classhub_competitions") as batch:
        batch.add_column(sa.Column("runner", _JSON, nullable=True))
        batch.add_column(sa.Column("scorer", _JSON, nullable=True))
    with op.batch_alter_table("classhub_entries") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="predictions"))
        batch.add_column(sa.Column("state", sa.String(16), nullable=False, server_default="scored"))
        batch.add_column(sa.Column("message", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("run", _JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("classhub_entries") as batch:
        for column in ("run", "message", "state", "kind"):
            batch.drop_column(column)
    with op.batch_alter_table("classhub_competitions") as batch:
        batch.drop_column("scorer")
        batch.drop_column("runner")
