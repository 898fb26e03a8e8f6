"""Invitations: enrolments that wait for the invited person's consent.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_NAME = sa.String(255)


def upgrade() -> None:
    op.create_table(
        "classhub_invitations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("username", _NAME, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("invited_by", _NAME, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_invitations"),
        sa.ForeignKeyConstraint(["course_id"], ["classhub_courses.id"], ondelete="CASCADE",
                                name="fk_classhub_invitations_course_id_classhub_courses"),
        sa.UniqueConstraint("course_id", "username", name="uq_classhub_invitations_course_id"),
        sa.CheckConstraint("role IN ('student', 'ta', 'teacher')", name="ck_classhub_invitations_role"),
    )


def downgrade() -> None:
    op.drop_table("classhub_invitations")
