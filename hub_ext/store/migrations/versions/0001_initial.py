"""Initial schema: courses, memberships, quotas, reservation ledger, audit log.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_TS = sa.DateTime(timezone=True)
_NAME = sa.String(255)
_FRACTION = sa.String(64)


def _limit_columns() -> list[sa.Column]:
    return [
        sa.Column("resources", _JSON, nullable=False),
        sa.Column("servers", sa.Integer(), nullable=True),
        sa.Column("gpu_hours_per_week", _FRACTION, nullable=True),
    ]


def upgrade() -> None:
    op.create_table(
        "classhub_courses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", _NAME, nullable=False),
        sa.Column("display_name", _NAME, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_courses"),
        sa.UniqueConstraint("name", name="uq_classhub_courses_name"),
    )
    op.create_table(
        "classhub_memberships",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("username", _NAME, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_memberships"),
        sa.ForeignKeyConstraint(
            ["course_id"], ["classhub_courses.id"], ondelete="CASCADE",
            name="fk_classhub_memberships_course_id_classhub_courses",
        ),
        sa.UniqueConstraint("course_id", "username", name="uq_classhub_memberships_course_id"),
        sa.CheckConstraint(
            "role IN ('student', 'ta', 'teacher')", name="ck_classhub_memberships_role"
        ),
    )
    op.create_table(
        "classhub_course_quotas",
        sa.Column("course_id", sa.Integer(), nullable=False),
        *_limit_columns(),
        sa.PrimaryKeyConstraint("course_id", name="pk_classhub_course_quotas"),
        sa.ForeignKeyConstraint(
            ["course_id"], ["classhub_courses.id"], ondelete="CASCADE",
            name="fk_classhub_course_quotas_course_id_classhub_courses",
        ),
    )
    op.create_table(
        "classhub_user_quotas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("username", _NAME, nullable=False),
        *_limit_columns(),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_user_quotas"),
        sa.ForeignKeyConstraint(
            ["course_id"], ["classhub_courses.id"], ondelete="CASCADE",
            name="fk_classhub_user_quotas_course_id_classhub_courses",
        ),
        sa.UniqueConstraint("course_id", "username", name="uq_classhub_user_quotas_course_id"),
    )
    op.create_table(
        "classhub_reservations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", _NAME, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("username", _NAME, nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=True),
        sa.Column("resources", _JSON, nullable=False),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("released_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_reservations"),
        sa.ForeignKeyConstraint(
            ["course_id"], ["classhub_courses.id"],
            name="fk_classhub_reservations_course_id_classhub_courses",
        ),
        sa.CheckConstraint("kind IN ('server', 'job')", name="ck_classhub_reservations_kind"),
    )
    # A key is unique among *unreleased* reservations only; released rows are history.
    op.create_index(
        "uq_classhub_reservations_active_key", "classhub_reservations", ["key"], unique=True,
        sqlite_where=sa.text("released_at IS NULL"),
        postgresql_where=sa.text("released_at IS NULL"),
    )
    op.create_index(
        "ix_classhub_reservations_course_active", "classhub_reservations", ["course_id", "released_at"]
    )
    op.create_index(
        "ix_classhub_reservations_user_active", "classhub_reservations", ["username", "released_at"]
    )
    op.create_table(
        "classhub_audit_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.Column("actor", _NAME, nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("details", _JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_audit_log"),
    )
    op.create_index("ix_classhub_audit_log_at", "classhub_audit_log", ["at"])


def downgrade() -> None:
    op.drop_table("classhub_audit_log")
    op.drop_table("classhub_reservations")
    op.drop_table("classhub_user_quotas")
    op.drop_table("classhub_course_quotas")
    op.drop_table("classhub_memberships")
    op.drop_table("classhub_courses")
