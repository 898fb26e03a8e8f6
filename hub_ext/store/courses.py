"""Small write helpers for courses, members and quotas, used by the API service and the tests.

Why here and not in handlers: setting a per-student quota must be refused when it exceeds the
course ceiling (core `ceiling_violations`), and every quota change is audited; keeping both next
to the tables means no handler can forget either.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from hub_ext.core.quota import Limits, ceiling_violations
from hub_ext.store.models import ROLES, AuditLog, Course, CourseQuota, Membership, UserQuota

__all__ = [
    "add_member", "all_members", "courses_of", "ensure_course", "record", "set_course_limits",
    "set_user_limits",
]


def ensure_course(session: Session, name: str, now: datetime, display_name: str = "") -> Course:
    """The course named `name` (a JupyterHub group), created when missing."""
    course = session.scalars(select(Course).where(Course.name == name)).one_or_none()
    if course is None:
        course = Course(name=name, display_name=display_name or name, created_at=now)
        session.add(course)
        session.flush()
    return course


def add_member(session: Session, course: Course, username: str, role: str = "student") -> Membership:
    """Add `username` to `course` with `role`, or change the role of an existing member."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    member = session.scalars(
        select(Membership).where(Membership.course_id == course.id, Membership.username == username)
    ).one_or_none()
    if member is None:
        member = Membership(course_id=course.id, username=username, role=role)
        session.add(member)
    else:
        member.role = role
    session.flush()
    return member


def set_course_limits(
    session: Session, course: Course, limits: Limits, *, actor: str, now: datetime
) -> CourseQuota:
    """Set the course ceiling (audited). Per-student limits above it remain but cannot bind more
    than the ceiling does, since admission checks the course too."""
    quota = session.get(CourseQuota, course.id)
    if quota is None:
        quota = CourseQuota(course_id=course.id)
        session.add(quota)
    quota.limits = limits
    session.add(_audit(actor, "quota.course.set", now, course=course.name, limits=limits.to_dict()))
    session.flush()
    return quota


def set_user_limits(
    session: Session, course: Course, username: str, limits: Limits, *, actor: str, now: datetime
) -> UserQuota:
    """Set one member's limits in `course` (audited); ValueError when above the course ceiling."""
    ceiling = session.get(CourseQuota, course.id)
    problems = ceiling_violations(limits, ceiling.limits if ceiling else Limits())
    if problems:
        raise ValueError("; ".join(problems))
    quota = session.scalars(
        select(UserQuota).where(UserQuota.course_id == course.id, UserQuota.username == username)
    ).one_or_none()
    if quota is None:
        quota = UserQuota(course_id=course.id, username=username)
        session.add(quota)
    quota.limits = limits
    session.add(
        _audit(actor, "quota.user.set", now, course=course.name, username=username,
               limits=limits.to_dict())
    )
    session.flush()
    return quota


def courses_of(session: Session, username: str) -> dict[str, str]:
    """The courses ``username`` belongs to, with their role in each (course name -> role)."""
    rows = session.execute(
        select(Course.name, Membership.role)
        .join(Membership, Membership.course_id == Course.id)
        .where(Membership.username == username)
    ).all()
    return {name: role for name, role in rows}


def all_members(session: Session) -> dict[str, dict[str, str]]:
    """course name -> username -> role, for every course (what the hub's roles are made from)."""
    members: dict[str, dict[str, str]] = {}
    for course, username, role in session.execute(
        select(Course.name, Membership.username, Membership.role).join(
            Membership, Membership.course_id == Course.id
        )
    ):
        members.setdefault(course, {})[username] = role
    return members


def record(session: Session, actor: str, action: str, now: datetime, **details: object) -> AuditLog:
    """Add an audit entry (e.g. ``spawn_denied`` with its reason, for the metrics and admins)."""
    entry = _audit(actor, action, now, **details)
    session.add(entry)
    return entry


def _audit(actor: str, action: str, now: datetime, **details: object) -> AuditLog:
    return AuditLog(at=now, actor=actor, action=action, details=details)
