"""Sharing: classhub's records of shares (kind, path, expiry, auto-start), link acceptances, and
per-course sharing settings.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_NAME = sa.String(255)


def upgrade() -> None:
    op.create_table(
        "classhub_shares",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", _NAME, nullable=False),
        sa.Column("server", _NAME, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("target_kind", sa.String(16), nullable=False),
        sa.Column("target", _NAME, nullable=False),
        sa.Column("path", sa.String(1024), nullable=True),
        sa.Column("auto_start", sa.Boolean(), nullable=False),
        sa.Column("code_sha256", sa.String(64), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("created_by", _NAME, nullable=False),
        sa.Column("expires_at", _TS, nullable=True),
        sa.Column("ended_at", _TS, nullable=True),
        sa.Column("end_reason", sa.String(16), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_shares"),
        sa.UniqueConstraint("code_sha256", name="uq_classhub_shares_code_sha256"),
        sa.CheckConstraint("kind IN ('read-only', 'edit')", name="ck_classhub_shares_kind"),
        sa.CheckConstraint("target_kind IN ('user', 'group', 'link')", name="ck_classhub_shares_target_kind"),
    )
    op.create_index("ix_classhub_shares_owner_server", "classhub_shares", ["owner", "server"])
    op.create_index("ix_classhub_shares_ended_at", "classhub_shares", ["ended_at"])
    op.create_table(
        "classhub_share_acceptances",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("share_id", sa.Integer(), nullable=False),
        sa.Column("user", _NAME, nullable=False),
        sa.Column("accepted_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_share_acceptances"),
        sa.ForeignKeyConstraint(
            ["share_id"], ["classhub_shares.id"], ondelete="CASCADE",
            name="fk_classhub_share_acceptances_share_id_classhub_shares",
        ),
        sa.UniqueConstraint("share_id", "user", name="uq_classhub_share_acceptances_share_id"),
    )
    op.create_table(
        "classhub_sharing_settings",
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("ta_server_access", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("course_id", name="pk_classhub_sharing_settings"),
        sa.ForeignKeyConstraint(
            ["course_id"], ["classhub_courses.id"], ondelete="CASCADE",
            name="fk_classhub_sharing_settings_course_id_classhub_courses",
        ),
    )


def downgrade() -> None:
    op.drop_table("classhub_sharing_settings")
    op.drop_table("classhub_share_acceptances")
    op.drop_index("ix_classhub_shares_ended_at", table_name="classhub_shares")
    op.drop_index("ix_classhub_shares_owner_server", table_name="classhub_shares")
    op.drop_table("classhub_shares")
