"""Competitions and their scored submissions (issue 34).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_NAME = sa.String(255)


def upgrade() -> None:
    op.create_table(
        "classhub_competitions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("metric", sa.String(16), nullable=False),
        sa.Column("public_fraction", sa.Float(), nullable=False),
        sa.Column("seed", sa.String(64), nullable=False),
        sa.Column("labels_location", _NAME, nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("daily_limit", sa.Integer(), nullable=False),
        sa.Column("anonymous", sa.Boolean(), nullable=False),
        sa.Column("opens_at", _TS, nullable=False),
        sa.Column("ends_at", _TS, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("created_by", _NAME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_competitions"),
        sa.ForeignKeyConstraint(["course_id"], ["classhub_courses.id"], ondelete="CASCADE",
                                name="fk_classhub_competitions_course_id_classhub_courses"),
        sa.UniqueConstraint("course_id", "name", name="uq_classhub_competitions_course_id"),
        sa.CheckConstraint("metric IN ('accuracy', 'rmse', 'macro_f1')",
                           name="ck_classhub_competitions_metric"),
    )
    op.create_table(
        "classhub_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("student", _NAME, nullable=False),
        sa.Column("submitted_at", _TS, nullable=False),
        sa.Column("location", _NAME, nullable=False),
        sa.Column("public_score", sa.Float(), nullable=True),
        sa.Column("private_score", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_entries"),
        sa.ForeignKeyConstraint(
            ["competition_id"], ["classhub_competitions.id"], ondelete="CASCADE",
            name="fk_classhub_entries_competition_id_classhub_competitions"),
    )
    op.create_index("ix_classhub_entries_competition_student", "classhub_entries",
                    ["competition_id", "student"])


def downgrade() -> None:
    op.drop_table("classhub_entries")
    op.drop_table("classhub_competitions")
