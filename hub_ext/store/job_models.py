"""Store models for distributed jobs (issue 17). Tables are created by migration 0007.

Why three tables: the job row is what was decided (its spec, state, the placement the admission
core chose, why it waits); a replica row is what one process or pod of it did (node, exit code,
restarts, the GPUs it was given); the event rows are the job's history, one sentence per change,
which is what a student reads when asking "why did it stop?". Resources a job holds are not kept
here but in the reservation ledger (kind "job", key "job:<job id>"), so a course's notebooks and
jobs are counted by one account.

`job_id` is the deterministic name of everything the job creates (processes' folders, Kubernetes
objects): re-doing a side effect after a crash finds the object made before instead of making a
second one. `(owner, client_id)` is unique, so a submit retried with the same id is one job.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Float, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from hub_ext.core.jobs import STATES
from hub_ext.store.models import Base, Course

__all__ = ["JobEvent", "JobRecord", "JobReplica"]

_STATES_SQL = "(" + ", ".join(f"'{s}'" for s in STATES) + ")"


class JobRecord(Base):
    """One submitted job and what was decided about it."""

    __tablename__ = "classhub_jobs"
    __table_args__ = (
        UniqueConstraint("owner", "client_id", name="uq_classhub_jobs_owner_client_id"),
        CheckConstraint(f"state IN {_STATES_SQL}", name="state"),
        Index("ix_classhub_jobs_state", "state"),
        Index("ix_classhub_jobs_course_state", "course_id", "state"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str] = mapped_column(String(63), unique=True)
    client_id: Mapped[str | None] = mapped_column(String(100))
    name: Mapped[str] = mapped_column(String(63))
    owner: Mapped[str]
    course_id: Mapped[int] = mapped_column(ForeignKey("classhub_courses.id", ondelete="CASCADE"))
    spec: Mapped[dict[str, Any]]
    """The submission as checked (`hub_ext.core.jobs.Submission`): command, env, workdir, roles."""
    priority: Mapped[int] = mapped_column(default=0)
    max_runtime: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16))
    reason_code: Mapped[str] = mapped_column(String(32), default="")
    reason: Mapped[str] = mapped_column(Text, default="")
    queue_position: Mapped[int | None]
    estimated_start: Mapped[datetime | None]
    submitted_at: Mapped[datetime]
    admitted_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    placement: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """{"replicas": [[role, index, node], ...], "port": master port, "borrowed": bool}."""
    stop_reason: Mapped[str | None] = mapped_column(String(32))
    stop_requested_at: Mapped[datetime | None]
    stop_by: Mapped[str | None]
    preemptions: Mapped[int] = mapped_column(default=0)
    waited_seconds: Mapped[float | None] = mapped_column(Float)
    """Seconds from submit to the (last) admission: the wait-time histogram's observations."""

    course: Mapped[Course] = relationship()
    replicas: Mapped[list[JobReplica]] = relationship(
        back_populates="job", cascade="all, delete-orphan", passive_deletes=True,
        order_by="(JobReplica.role_order, JobReplica.index)")
    events: Mapped[list[JobEvent]] = relationship(
        back_populates="job", cascade="all, delete-orphan", passive_deletes=True,
        order_by="JobEvent.id")


class JobReplica(Base):
    """One replica (a process or pod) of an admitted job: where it runs and how it ended."""

    __tablename__ = "classhub_job_replicas"
    __table_args__ = (UniqueConstraint("job_pk", "role", "index", name="uq_classhub_job_replicas_job_pk"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("classhub_jobs.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(String(63))
    role_order: Mapped[int] = mapped_column(default=0)
    index: Mapped[int]
    rank: Mapped[int]
    node: Mapped[str] = mapped_column(default="")
    state: Mapped[str] = mapped_column(String(16), default="pending")
    exit_code: Mapped[int | None]
    restarts: Mapped[int] = mapped_column(default=0)
    devices: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """{"gpu_uuids": [...]} in local mode."""
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    job: Mapped[JobRecord] = relationship(back_populates="replicas")


class JobEvent(Base):
    """One change of a job: its new state (or the same state with news) and a sentence."""

    __tablename__ = "classhub_job_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_pk: Mapped[int] = mapped_column(ForeignKey("classhub_jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime]
    state: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text)

    job: Mapped[JobRecord] = relationship(back_populates="events")
