"""Assignments and their submissions (issue 34).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_NAME = sa.String(255)
_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "classhub_assignments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("folder", _NAME, nullable=False),
        sa.Column("opens_at", _TS, nullable=False),
        sa.Column("due_at", _TS, nullable=False),
        sa.Column("cutoff_at", _TS, nullable=True),
        sa.Column("late_policy", sa.String(16), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("created_by", _NAME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_assignments"),
        sa.ForeignKeyConstraint(["course_id"], ["classhub_courses.id"], ondelete="CASCADE",
                                name="fk_classhub_assignments_course_id_classhub_courses"),
        sa.ForeignKeyConstraint(["version_id"], ["classhub_template_versions.id"],
                                ondelete="RESTRICT",
                                name="fk_classhub_assignments_version_id_classhub_template_versions"),
        sa.UniqueConstraint("course_id", "name", name="uq_classhub_assignments_course_id"),
        sa.CheckConstraint("late_policy IN ('refuse', 'accept-late')",
                           name="ck_classhub_assignments_late_policy"),
    )
    op.create_table(
        "classhub_submissions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=False),
        sa.Column("student", _NAME, nullable=False),
        sa.Column("submitted_at", _TS, nullable=False),
        sa.Column("late", sa.Boolean(), nullable=False),
        sa.Column("location", _NAME, nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("skipped", _JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_submissions"),
        sa.ForeignKeyConstraint(["assignment_id"], ["classhub_assignments.id"], ondelete="CASCADE",
                                name="fk_classhub_submissions_assignment_id_classhub_assignments"),
    )
    op.create_index("ix_classhub_submissions_assignment_student", "classhub_submissions",
                    ["assignment_id", "student"])


def downgrade() -> None:
    op.drop_table("classhub_submissions")
    op.drop_table("classhub_assignments")
