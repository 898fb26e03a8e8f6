"""Culler: persistent servers, per-course culling policies, no-cull windows, warnings, shortfalls.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later. Culls themselves are audit log rows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_NAME = sa.String(255)


def upgrade() -> None:
    op.create_table(
        "classhub_culler_persistent",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", _NAME, nullable=False),
        sa.Column("server_name", _NAME, nullable=False),
        sa.Column("marked_by", _NAME, nullable=False),
        sa.Column("marked_at", _TS, nullable=False),
        sa.Column("note", _NAME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_culler_persistent"),
        sa.UniqueConstraint("username", "server_name", name="uq_classhub_culler_persistent_username"),
    )
    op.create_table(
        "classhub_culler_policies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("course", _NAME, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("idle_timeout", sa.Float(), nullable=True),
        sa.Column("max_age", sa.Float(), nullable=True),
        sa.Column("never_cull", sa.Boolean(), nullable=True),
        sa.Column("warn_before", sa.Float(), nullable=True),
        sa.Column("pressure_min_idle", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_culler_policies"),
        sa.UniqueConstraint("course", "kind", name="uq_classhub_culler_policies_course"),
        sa.CheckConstraint(
            "kind IN ('', 'cpu', 'gpu', 'mig', 'shared')", name="ck_classhub_culler_policies_kind"
        ),
    )
    op.create_table(
        "classhub_culler_windows",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("course", _NAME, nullable=False),
        sa.Column("starts_at", _TS, nullable=False),
        sa.Column("ends_at", _TS, nullable=False),
        sa.Column("note", _NAME, nullable=False),
        sa.Column("created_by", _NAME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_culler_windows"),
    )
    op.create_index(
        "ix_classhub_culler_windows_course_end", "classhub_culler_windows", ["course", "ends_at"]
    )
    op.create_table(
        "classhub_culler_warnings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", _NAME, nullable=False),
        sa.Column("server_name", _NAME, nullable=False),
        sa.Column("warned_at", _TS, nullable=False),
        sa.Column("cull_at", _TS, nullable=False),
        sa.Column("message", sa.String(1000), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_culler_warnings"),
        sa.UniqueConstraint("username", "server_name", name="uq_classhub_culler_warnings_username"),
    )
    op.create_table(
        "classhub_culler_shortfalls",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("resource", _NAME, nullable=False),
        sa.Column("units", sa.Integer(), nullable=False),
        sa.Column("username", _NAME, nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.Column("handled_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_culler_shortfalls"),
    )
    op.create_index("ix_classhub_culler_shortfalls_open", "classhub_culler_shortfalls", ["handled_at"])


def downgrade() -> None:
    op.drop_table("classhub_culler_shortfalls")
    op.drop_table("classhub_culler_warnings")
    op.drop_table("classhub_culler_windows")
    op.drop_table("classhub_culler_policies")
    op.drop_table("classhub_culler_persistent")
