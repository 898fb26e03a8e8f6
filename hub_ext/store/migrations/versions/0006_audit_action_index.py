"""An index on the audit log's action: metrics count spawn denials and culls by action at every
scrape, which without it reads the whole log.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_classhub_audit_log_action", "classhub_audit_log", ["action"])


def downgrade() -> None:
    op.drop_index("ix_classhub_audit_log_action", table_name="classhub_audit_log")
