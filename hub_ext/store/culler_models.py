"""Store models for the idle culler (issue 8). Tables are created by migration 0004.

Why in the database (docs/architecture.md, rule 4): what an admin decided (a persistent demo
server, a course's own timeouts, an exam's no-cull window) and what the culler promised a user
(a pending warning)
must survive a restart of the culler or the hub. The culls themselves go to the audit log
(`AuditLog`, action ``server_culled``), which the metrics count.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, Float, Index, String, UniqueConstraint, func, select, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from hub_ext.store.models import Base

__all__ = ["CullPolicyRow", "CullWarning", "NoCullWindow", "PersistentServer", "Shortfall"]

#: Profile kinds a course policy may name; "" means every kind of the course.
KINDS = ("", "cpu", "gpu", "mig", "shared")
#: The audit-log action of a cull (the culler writes it; the metrics count it).
CULLED_ACTION = "server_culled"


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


# ---- queries and changes (used by the culler, the service and the spawners) ----------------------


def persistent_keys(session: Session) -> set[tuple[str, str]]:
    """(user, server name) of every server marked persistent."""
    rows = session.execute(select(PersistentServer.username, PersistentServer.server_name))
    return {(user, name) for user, name in rows}


def set_persistent(session: Session, username: str, server_name: str, persistent: bool, by: str,
                   now: datetime, note: str = "") -> None:
    """Mark (or unmark) a server persistent; idempotent."""
    row = session.scalar(select(PersistentServer).where(
        PersistentServer.username == username, PersistentServer.server_name == server_name))
    if persistent and row is None:
        session.add(PersistentServer(username=username, server_name=server_name, marked_by=by,
                                     marked_at=now, note=note))
    elif persistent and row is not None:
        row.note = note or row.note
    elif row is not None:
        session.delete(row)


def course_policies(session: Session) -> list[CullPolicyRow]:
    return list(session.scalars(select(CullPolicyRow).order_by(CullPolicyRow.course, CullPolicyRow.kind)))


def set_course_policy(session: Session, course: str, kind: str, fields: dict[str, object] | None) -> None:
    """Set (``fields``) or remove (None) a course's policy for ``kind`` ("" = all kinds)."""
    row = session.scalar(select(CullPolicyRow).where(CullPolicyRow.course == course,
                                                     CullPolicyRow.kind == kind))
    if fields is None:
        if row is not None:
            session.delete(row)
        return
    if row is None:
        row = CullPolicyRow(course=course, kind=kind)
        session.add(row)
    for name in POLICY_FIELDS:
        setattr(row, name, fields.get(name))


#: The columns of `CullPolicyRow` an admin sets (NULL: the site default).
POLICY_FIELDS = ("idle_timeout", "max_age", "never_cull", "warn_before", "pressure_min_idle")


def windows(session: Session, now: datetime, course: str | None = None) -> list[NoCullWindow]:
    """Windows that have not ended yet (of one course, or all), earliest first."""
    q = select(NoCullWindow).where(NoCullWindow.ends_at > now)
    if course is not None:
        q = q.where(NoCullWindow.course == course)
    return list(session.scalars(q.order_by(NoCullWindow.starts_at, NoCullWindow.id)))


def warnings_of(session: Session, username: str | None = None) -> list[CullWarning]:
    q = select(CullWarning)
    if username is not None:
        q = q.where(CullWarning.username == username)
    return list(session.scalars(q.order_by(CullWarning.username, CullWarning.server_name)))


def record_shortfall(session: Session, resource: str, units: int, username: str, now: datetime) -> None:
    session.add(Shortfall(resource=resource, units=units, username=username, at=now))


def open_shortfalls(session: Session, since: datetime) -> dict[str, int]:
    """Units missing per resource: open shortfalls recorded after ``since`` (older ones expire);
    one user asking many times counts once per resource."""
    rows = session.execute(
        select(Shortfall.resource, Shortfall.username, func.max(Shortfall.units))
        .where(Shortfall.handled_at.is_(None), Shortfall.at >= since)
        .group_by(Shortfall.resource, Shortfall.username)
    ).all()
    out: dict[str, int] = {}
    for resource, _user, units in rows:
        out[resource] = out.get(resource, 0) + int(units)
    return out


def close_shortfalls(session: Session, now: datetime) -> None:
    session.execute(update(Shortfall).where(Shortfall.handled_at.is_(None)).values(handled_at=now))
