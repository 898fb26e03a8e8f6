"""A template version that only the course's staff see until an assignment using it opens.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later. Every version published before is the course's,
as it was (false).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("classhub_template_versions") as batch:
        batch.add_column(sa.Column("staff_only", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("classhub_template_versions") as batch:
        batch.drop_column("staff_only")
