"""A course's own data folder limit, set by hub admins (issue 35).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later. NULL: the configured limit applies.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("classhub_courses") as batch:
        batch.add_column(sa.Column("data_max_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("classhub_courses") as batch:
        batch.drop_column("data_max_bytes")
