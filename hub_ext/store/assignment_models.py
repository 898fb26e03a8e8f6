"""Store models for assignments and their submissions (issue 34). Tables are created by
migration 0009; autograding's columns by 0011.

Why these shapes:
- An assignment belongs to one course, has a name unique in it, and releases one template
  *version* (not "the newest"): the files a student starts from must not change under them when
  the teacher publishes again. ``folder`` is where the work lives in each home (the template
  version's files are seeded there; Submit snapshots that folder).
- A submission is one immutable snapshot, never overwritten: resubmitting adds a row and a
  folder (all kept, the last one counts). Its time is the service's clock when the snapshot was
  taken, and ``late`` is decided then (hub_ext.core.assignments.judge), so changing the due date
  later does not rewrite history. ``location`` is relative to the submissions storage and made of
  ids only (no user-chosen names).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    String,
    Text,
    UniqueConstraint,
    select,
)
from sqlalchemy.orm import Mapped, Session, mapped_column, relationship

from hub_ext.core import authz
from hub_ext.core.assignments import LATE_POLICIES
from hub_ext.core.grading import feedback
from hub_ext.store.models import Base, Course
from hub_ext.store.template_models import Template, TemplateVersion
from hub_ext.store.types import JSONType

__all__ = ["Assignment", "Submission", "assignment_json", "autograde_json", "held_back", "hidden_from",
           "submission_json", "visibility"]

_POLICIES_SQL = "(" + ", ".join(f"'{p}'" for p in LATE_POLICIES) + ")"


class Assignment(Base):
    """An assignment a teacher released: which files, where they go, and when it is due."""

    __tablename__ = "classhub_assignments"
    __table_args__ = (
        UniqueConstraint("course_id", "name", name="uq_classhub_assignments_course_id"),
        CheckConstraint(f"late_policy IN {_POLICIES_SQL}", name="late_policy"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("classhub_courses.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    title: Mapped[str] = mapped_column(Text, default="")
    version_id: Mapped[int] = mapped_column(
        ForeignKey("classhub_template_versions.id", ondelete="RESTRICT"))
    folder: Mapped[str] = mapped_column(String(255))
    opens_at: Mapped[datetime]
    due_at: Mapped[datetime]
    cutoff_at: Mapped[datetime | None]
    late_policy: Mapped[str] = mapped_column(String(16), default="refuse")
    created_at: Mapped[datetime]
    created_by: Mapped[str]
    autograde: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    """None: not autograded. Else the grading settings (hub_ext.service.assignments.grading):
    the notebooks, their graded cells and points, the profile, time and memory limits, and who
    set it (the grading jobs' owner)."""

    course: Mapped[Course] = relationship()
    version: Mapped[TemplateVersion] = relationship()
    submissions: Mapped[list[Submission]] = relationship(
        back_populates="assignment", cascade="all, delete-orphan", passive_deletes=True,
        order_by="Submission.id")


class Submission(Base):
    """One snapshot of a student's assignment folder, as it was when they pressed Submit."""

    __tablename__ = "classhub_submissions"
    __table_args__ = (Index("ix_classhub_submissions_assignment_student", "assignment_id", "student"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("classhub_assignments.id", ondelete="CASCADE"))
    student: Mapped[str]
    submitted_at: Mapped[datetime]
    late: Mapped[bool] = mapped_column(default=False)
    location: Mapped[str] = mapped_column(String(255))
    files: Mapped[int]
    bytes: Mapped[int] = mapped_column(BigInteger)
    skipped: Mapped[list[str]] = mapped_column(JSONType, default=list)
    """Entries of the folder not taken (symbolic links, devices): named so the student knows."""
    grading: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    """The last grading: its job, state (queued, done, failed), each notebook's cell scores and
    the sentence about the run. None: never graded."""
    overrides: Mapped[dict[str, float] | None] = mapped_column(JSONType, nullable=True)
    """Staff scores per grade_id ("<notebook>:<grade_id>"), which replace the grader's."""
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_score: Mapped[float | None] = mapped_column(Float, nullable=True)

    assignment: Mapped[Assignment] = relationship(back_populates="submissions")


def held_back(session: Session, course: str, now: datetime) -> set[int]:
    """The ids of the template versions of ``course`` that are its staff's alone at ``now``:
    those only assignments not open yet released, and those published ``staff_only`` that no
    open assignment released.

    Why: an assignment does not exist for a student before its ``opens_at``
    (docs/teachers/assignments.md), and its files are a template version; every way a student
    reaches a version (the templates API and pages, a start from a template through classhub or
    through the hub's own API, an ``on_start`` re-seed) leaves these out, so a scheduled exam is
    not readable, nor startable, before it opens, from the moment it is published (``staff_only``)
    or released. A version an open assignment released, or any other, is the course's."""
    rows = session.execute(select(Assignment.version_id, Assignment.opens_at).join(Course)
                           .where(Course.name == course)).all()
    opened = {version for version, opens_at in rows if opens_at <= now}
    staff = set(session.scalars(select(TemplateVersion.id).join(Template).join(Course).where(
        Course.name == course, TemplateVersion.staff_only.is_(True))))
    return ({version for version, opens_at in rows if opens_at > now} | staff) - opened


def visibility(session: Session, caller: authz.Caller, course: str,
               now: datetime) -> tuple[set[int], set[int]]:
    """(the template versions of ``course`` that ``caller`` may not see, start or list yet, those
    `held_back` at ``now``): the first is the second for a student, empty for whoever sees every
    assignment of the course (its teachers and TAs, admins: ``authz.READ_SUBMISSIONS``), who are
    shown the held versions marked. Every reader of a course's templates on a user's behalf asks
    this: the service's templates API and pages, and the hub's start from a template
    (hub_ext.backends.templates_spawn)."""
    held = held_back(session, course, now)
    return (set() if authz.decide(caller, authz.READ_SUBMISSIONS, course=course) else held), held


def hidden_from(session: Session, caller: authz.Caller, course: str, now: datetime) -> set[int]:
    """The first of `visibility`: what ``caller`` may not see of ``course``'s templates."""
    return visibility(session, caller, course, now)[0]


def assignment_json(a: Assignment, course: str) -> dict[str, Any]:
    v = a.version
    return {
        "course": course,
        "name": a.name,
        "title": a.title,
        "template": v.template.name,
        "version": v.version,
        "folder": a.folder,
        "opens_at": a.opens_at.isoformat(),
        "due_at": a.due_at.isoformat(),
        "cutoff_at": a.cutoff_at.isoformat() if a.cutoff_at else None,
        "late_policy": a.late_policy,
        "created_at": a.created_at.isoformat(),
        "created_by": a.created_by,
        "autograded": bool(a.autograde),
        "max_score": (a.autograde or {}).get("max_score"),
    }


def autograde_json(settings: dict[str, Any] | None) -> dict[str, Any]:
    """An assignment's grading settings as staff see them (the API's GET .../autograde and the
    course page): never the teacher's source notebooks, nor the job's resolved fields."""
    if not settings:
        return {"autograded": False}
    return {"autograded": True, "notebooks": settings["notebooks"], "profile": settings["profile"],
            "time_limit": settings["time_limit"],
            "memory_mib": (settings.get("memory") or 0) // 2**20 or None,
            "max_score": settings["max_score"], "owner": settings["owner"],
            "cells": {path: [{"grade_id": g, "points": p, "auto": a} for g, p, a in cells]
                      for path, cells in settings["cells"].items()}}


def submission_json(s: Submission, *, latest: bool = False) -> dict[str, Any]:
    return {
        "id": s.id,
        "student": s.student,
        "submitted_at": s.submitted_at.isoformat(),
        "late": s.late,
        "files": s.files,
        "bytes": s.bytes,
        "skipped": list(s.skipped or []),
        "latest": latest,
        "score": s.score,
        "max_score": s.max_score,
        "feedback": feedback(s.grading, s.overrides),
    }
