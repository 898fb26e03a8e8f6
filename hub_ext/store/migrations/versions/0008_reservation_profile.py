"""The profile of each server reservation, so that GPU use can be shown by profile as well as by
course (``classhub_server_devices{profile}``).

Nullable: reservations made before this revision, jobs' reservations and reservations of
callers that know no profile have none.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("classhub_reservations", sa.Column("profile", sa.String(255), nullable=True))


def downgrade() -> None:
    # A plain ALTER TABLE ... DROP COLUMN (PostgreSQL; sqlite since 3.35): no copy of the ledger
    # table and its partial unique index, as a batch operation on sqlite would make.
    op.drop_column("classhub_reservations", "profile")
