"""Templates: published course templates and their versions, per-course template settings.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_TS = sa.DateTime(timezone=True)
_NAME = sa.String(255)


def upgrade() -> None:
    op.create_table(
        "classhub_templates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("created_by", _NAME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_templates"),
        sa.ForeignKeyConstraint(
            ["course_id"], ["classhub_courses.id"], ondelete="CASCADE",
            name="fk_classhub_templates_course_id_classhub_courses",
        ),
        sa.UniqueConstraint("course_id", "name", name="uq_classhub_templates_course_id"),
    )
    op.create_table(
        "classhub_template_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("template_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("image", _NAME, nullable=True),
        sa.Column("profile", sa.String(64), nullable=True),
        sa.Column("start_command", _JSON, nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("location", _NAME, nullable=False),
        sa.Column("manifest_sha256", sa.String(64), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("created_by", _NAME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_template_versions"),
        sa.ForeignKeyConstraint(
            ["template_id"], ["classhub_templates.id"], ondelete="CASCADE",
            name="fk_classhub_template_versions_template_id_classhub_templates",
        ),
        sa.UniqueConstraint("template_id", "version", name="uq_classhub_template_versions_template_id"),
        sa.CheckConstraint("version >= 1", name="ck_classhub_template_versions_version"),
    )
    op.create_table(
        "classhub_template_settings",
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("reseed", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("course_id", name="pk_classhub_template_settings"),
        sa.ForeignKeyConstraint(
            ["course_id"], ["classhub_courses.id"], ondelete="CASCADE",
            name="fk_classhub_template_settings_course_id_classhub_courses",
        ),
        sa.CheckConstraint("reseed IN ('manual', 'on_start')", name="ck_classhub_template_settings_reseed"),
    )


def downgrade() -> None:
    op.drop_table("classhub_template_settings")
    op.drop_table("classhub_template_versions")
    op.drop_table("classhub_templates")
