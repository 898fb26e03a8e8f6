"""Autograding: an assignment's grading settings, a submission's grading, scores and overrides (issue 34).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("classhub_assignments") as batch:
        batch.add_column(sa.Column("autograde", _JSON, nullable=True))
    with op.batch_alter_table("classhub_submissions") as batch:
        batch.add_column(sa.Column("grading", _JSON, nullable=True))
        batch.add_column(sa.Column("overrides", _JSON, nullable=True))
        batch.add_column(sa.Column("score", sa.Float(), nullable=True))
        batch.add_column(sa.Column("max_score", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("classhub_submissions") as batch:
        for column in ("max_score", "score", "overrides", "grading"):
            batch.drop_column(column)
    with op.batch_alter_table("classhub_assignments") as batch:
        batch.drop_column("autograde")
