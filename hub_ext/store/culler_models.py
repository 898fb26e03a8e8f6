"""Store models for the idle culler (issue 8). Tables are created by migration 0004.

Why in the database (DESIGN.md rule 4): what an admin decided (a persistent demo server, a course's
own timeouts, an exam's no-cull window) and what the culler promised a user (a pending warning)
must survive a restart of the culler or the hub. The culls themselves go to the audit log
(`AuditLog`, action ``server_culled``), which the metrics count.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, Float, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from hub_ext.store.models import Base

__all__ = ["CullPolicyRow", "CullWarning", "NoCullWindow", "PersistentServer", "Shortfall"]

#: Profile kinds a course policy may name; "" means every kind of the course.
KINDS = ("", "cpu", "gpu", "mig", "shared")


class PersistentServer(Base):
    """A server an admin marked persistent (e.g. a demo site): never culled."""

    __tablename__ = "classhub_culler_persistent"
    __table_args__ = (UniqueConstraint("username", "server_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str]
    server_name: Mapped[str] = mapped_column(default="")
    marked_by: Mapped[str]
    marked_at: Mapped[datetime]
    note: Mapped[str] = mapped_column(default="")


class CullPolicyRow(Base):
    """A course's own culling policy, for one profile kind or (kind "") all of them.

    A column left NULL takes the site default of that kind (the culler's traits).
    """

    __tablename__ = "classhub_culler_policies"
    __table_args__ = (
        UniqueConstraint("course", "kind"),
        CheckConstraint(f"kind IN {KINDS!r}", name="kind"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    course: Mapped[str]
    kind: Mapped[str] = mapped_column(String(16), default="")
    idle_timeout: Mapped[float | None] = mapped_column(Float)
    max_age: Mapped[float | None] = mapped_column(Float)
    never_cull: Mapped[bool | None]
    warn_before: Mapped[float | None] = mapped_column(Float)
    pressure_min_idle: Mapped[float | None] = mapped_column(Float)


class NoCullWindow(Base):
    """A time window in which no server of the course is culled (e.g. an exam)."""

    __tablename__ = "classhub_culler_windows"
    __table_args__ = (Index("ix_classhub_culler_windows_course_end", "course", "ends_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    course: Mapped[str]
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime]
    note: Mapped[str] = mapped_column(default="")
    created_by: Mapped[str]


class CullWarning(Base):
    """A pending warning: the user's server will be culled at ``cull_at`` unless used."""

    __tablename__ = "classhub_culler_warnings"
    __table_args__ = (UniqueConstraint("username", "server_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str]
    server_name: Mapped[str] = mapped_column(default="")
    warned_at: Mapped[datetime]
    cull_at: Mapped[datetime]
    message: Mapped[str] = mapped_column(String(1000), default="")


class Shortfall(Base):
    """A spawn refused for lack of capacity: the culler reclaims ``units`` of ``resource``.

    Written by the spawner (in the hub); the culler's next cycle turns open rows into pressure
    and closes them (``handled_at``).
    """

    __tablename__ = "classhub_culler_shortfalls"
    __table_args__ = (Index("ix_classhub_culler_shortfalls_open", "handled_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    resource: Mapped[str]
    units: Mapped[int]
    username: Mapped[str]
    at: Mapped[datetime]
    handled_at: Mapped[datetime | None]
