"""The tables classhub owns: courses, members, quotas, the reservation ledger and the audit log.

Why these shapes:
- A course *is* a JupyterHub group (`Course.name` is the group name); the database only adds what
  the hub cannot hold: roles, quotas and the ledger.
- Table names start with ``classhub_`` and the Alembic version table is ``classhub_alembic_version``,
  so classhub can share JupyterHub's own database without colliding with its tables or migrations.
- `Reservation` is the ledger that makes quotas race-free: an unreleased row holds resources; a
  released row stays as history for GPU-hours. A key ("server:<user>/<name>", "job:<id>") is unique
  among unreleased rows only (partial unique index), so a server can be reserved again after it
  stopped.
"""

from __future__ import annotations

from datetime import datetime
from fractions import Fraction
from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, MetaData, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column, relationship

from hub_ext.core.quota import Limits, parse_limits
from hub_ext.core.resources import ResourceVector
from hub_ext.core.roles import STUDENT, TA, TEACHER
from hub_ext.store.types import ExactFraction, JSONType, UTCDateTime

__all__ = [
    "ROLES",
    "AuditLog",
    "Base",
    "Course",
    "CourseQuota",
    "Invitation",
    "Membership",
    "Reservation",
    "UserQuota",
]

ROLES = (STUDENT, TA, TEACHER)
KINDS = ("server", "job")

# Deterministic constraint names: Alembic can drop/alter them later on every database.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {
        datetime: UTCDateTime(),
        Fraction: ExactFraction(),
        dict[str, Any]: JSONType,
        str: String(255),
    }


class Course(Base):
    """A course: a JupyterHub group that classhub manages."""

    __tablename__ = "classhub_courses"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(unique=True)
    display_name: Mapped[str] = mapped_column(default="")
    created_at: Mapped[datetime]
    #: The course's own data folder limit in bytes, set by hub admins (0: no limit); None: the
    #: configured ``c.ClasshubCourseData`` limit (docs/admins/course-data.md).
    data_max_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)

    memberships: Mapped[list[Membership]] = relationship(
        back_populates="course", cascade="all, delete-orphan", passive_deletes=True
    )
    quota: Mapped[CourseQuota | None] = relationship(
        back_populates="course", cascade="all, delete-orphan", passive_deletes=True
    )


class _CourseRole:
    """A user with a role in a course: the shape of a membership and of an invitation to one."""

    @declared_attr.directive
    def __table_args__(cls) -> tuple:
        return (UniqueConstraint("course_id", "username"),
                CheckConstraint(f"role IN {ROLES!r}", name="role"))

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("classhub_courses.id", ondelete="CASCADE"))
    username: Mapped[str]
    role: Mapped[str] = mapped_column(String(16), default=STUDENT)


class Membership(_CourseRole, Base):
    """One user's role in one course (student, ta or teacher)."""

    __tablename__ = "classhub_memberships"

    course: Mapped[Course] = relationship(back_populates="memberships")


class Invitation(_CourseRole, Base):
    """A pending enrolment the invited person must accept (docs/admins/security.md, "Security model", rule 1).

    Made when a teacher enrols someone who already belongs to another course: joining gives this
    course's staff power over that person's server, so it waits for their consent. Accepting
    turns it into a `Membership`; declining or a teacher's removal deletes it.
    """

    __tablename__ = "classhub_invitations"

    invited_by: Mapped[str]
    created_at: Mapped[datetime]

    course: Mapped[Course] = relationship()


class _LimitColumns:
    """Limits as columns: a k8s resource map (zero ceilings kept as "0"), servers, GPU hours."""

    resources: Mapped[dict[str, Any]] = mapped_column(default=dict)
    servers: Mapped[int | None]
    gpu_hours_per_week: Mapped[Fraction | None]

    @property
    def limits(self) -> Limits:
        return parse_limits(
            {
                "resources": self.resources,
                "servers": self.servers,
                "gpu_hours_per_week": self.gpu_hours_per_week,
            }
        )

    @limits.setter
    def limits(self, limits: Limits) -> None:
        self.resources = limits.to_dict()["resources"]
        self.servers = limits.servers
        self.gpu_hours_per_week = limits.gpu_hours_per_week


class CourseQuota(_LimitColumns, Base):
    """The course ceiling: what all members together may hold. No row = no ceiling."""

    __tablename__ = "classhub_course_quotas"

    course_id: Mapped[int] = mapped_column(
        ForeignKey("classhub_courses.id", ondelete="CASCADE"), primary_key=True
    )
    course: Mapped[Course] = relationship(back_populates="quota")


class UserQuota(_LimitColumns, Base):
    """Per-student limits inside one course (checked against the ceiling by the API)."""

    __tablename__ = "classhub_user_quotas"
    __table_args__ = (UniqueConstraint("course_id", "username"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("classhub_courses.id", ondelete="CASCADE"))
    username: Mapped[str]


class Reservation(Base):
    """The ledger: resources held by a server or job from `started_at` until `released_at`.

    `profile` is the slug of the profile a server was started with, kept so that GPU use can be
    shown by profile (metrics); None for jobs, for older rows and when the caller knew none.
    """

    __tablename__ = "classhub_reservations"
    __table_args__ = (
        Index(
            "uq_classhub_reservations_active_key",
            "key",
            unique=True,
            sqlite_where="released_at IS NULL",
            postgresql_where="released_at IS NULL",
        ),
        Index("ix_classhub_reservations_course_active", "course_id", "released_at"),
        Index("ix_classhub_reservations_user_active", "username", "released_at"),
        CheckConstraint(f"kind IN {KINDS!r}", name="kind"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str]
    kind: Mapped[str] = mapped_column(String(16), default="server")
    username: Mapped[str]
    course_id: Mapped[int | None] = mapped_column(ForeignKey("classhub_courses.id"))
    resources: Mapped[dict[str, Any]]
    profile: Mapped[str | None]
    started_at: Mapped[datetime]
    released_at: Mapped[datetime | None]

    course: Mapped[Course | None] = relationship()

    @property
    def request(self) -> ResourceVector:
        return ResourceVector.from_k8s(self.resources)

    @property
    def active(self) -> bool:
        return self.released_at is None


class AuditLog(Base):
    """Who did what, when: quota changes, forced releases, shares. Append-only."""

    __tablename__ = "classhub_audit_log"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(index=True)
    actor: Mapped[str]
    action: Mapped[str] = mapped_column(String(64), index=True)  # metrics count by action
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
