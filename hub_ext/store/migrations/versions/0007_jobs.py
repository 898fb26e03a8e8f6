"""Distributed jobs: jobs, their replicas and their history.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

Types are spelled out (not imported from hub_ext.store.types) so this revision keeps creating
the same schema when the models change later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_NAME = sa.String(255)
_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_STATES = "('queued', 'admitted', 'running', 'succeeded', 'failed', 'cancelled', 'preempted')"


def upgrade() -> None:
    op.create_table(
        "classhub_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(63), nullable=False),
        sa.Column("client_id", sa.String(100), nullable=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("owner", _NAME, nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("spec", _JSON, nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("max_runtime", sa.Float(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason_code", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("queue_position", sa.Integer(), nullable=True),
        sa.Column("estimated_start", _TS, nullable=True),
        sa.Column("submitted_at", _TS, nullable=False),
        sa.Column("admitted_at", _TS, nullable=True),
        sa.Column("started_at", _TS, nullable=True),
        sa.Column("finished_at", _TS, nullable=True),
        sa.Column("placement", _JSON, nullable=False),
        sa.Column("stop_reason", sa.String(32), nullable=True),
        sa.Column("stop_requested_at", _TS, nullable=True),
        sa.Column("stop_by", _NAME, nullable=True),
        sa.Column("preemptions", sa.Integer(), nullable=False),
        sa.Column("waited_seconds", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_jobs"),
        sa.ForeignKeyConstraint(["course_id"], ["classhub_courses.id"], ondelete="CASCADE",
                                name="fk_classhub_jobs_course_id_classhub_courses"),
        sa.UniqueConstraint("job_id", name="uq_classhub_jobs_job_id"),
        sa.UniqueConstraint("owner", "client_id", name="uq_classhub_jobs_owner_client_id"),
        sa.CheckConstraint(f"state IN {_STATES}", name="ck_classhub_jobs_state"),
    )
    op.create_index("ix_classhub_jobs_state", "classhub_jobs", ["state"])
    op.create_index("ix_classhub_jobs_course_state", "classhub_jobs", ["course_id", "state"])
    op.create_table(
        "classhub_job_replicas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_pk", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(63), nullable=False),
        sa.Column("role_order", sa.Integer(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("node", _NAME, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("devices", _JSON, nullable=False),
        sa.Column("started_at", _TS, nullable=True),
        sa.Column("finished_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_job_replicas"),
        sa.ForeignKeyConstraint(["job_pk"], ["classhub_jobs.id"], ondelete="CASCADE",
                                name="fk_classhub_job_replicas_job_pk_classhub_jobs"),
        sa.UniqueConstraint("job_pk", "role", "index", name="uq_classhub_job_replicas_job_pk"),
    )
    op.create_table(
        "classhub_job_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_pk", sa.Integer(), nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_classhub_job_events"),
        sa.ForeignKeyConstraint(["job_pk"], ["classhub_jobs.id"], ondelete="CASCADE",
                                name="fk_classhub_job_events_job_pk_classhub_jobs"),
    )
    op.create_index("ix_classhub_job_events_job_pk", "classhub_job_events", ["job_pk"])


def downgrade() -> None:
    op.drop_table("classhub_job_events")
    op.drop_table("classhub_job_replicas")
    op.drop_table("classhub_jobs")
