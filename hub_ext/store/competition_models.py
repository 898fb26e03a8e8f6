"""Store models for competitions and their scored submissions (issue 34). Tables are created by
migration 0010.

Why these shapes:
- A competition belongs to one course and has a name unique in it. Its hidden labels are a file
  in the service's own storage (mode 0700; ``labels_location``, made of ids only), never a column
  a listing could leak. ``seed`` fixes which ids are public (hub_ext.core.competitions.split): a
  secret of the service, never shown to students.
- An entry (a submission) row is written only for an accepted, scored file: public and private scores are
  computed once, on the service's clock, so changing the end time later does not rescore.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Float, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from hub_ext.core.competitions import METRICS
from hub_ext.store.models import Base, Course

__all__ = ["Competition", "CompetitionSubmission", "competition_json", "entry_json"]

_METRICS_SQL = "(" + ", ".join(f"'{m}'" for m in METRICS) + ")"


class Competition(Base):
    """A challenge a teacher published: the metric, the hidden labels, the window, the limit."""

    __tablename__ = "classhub_competitions"
    __table_args__ = (
        UniqueConstraint("course_id", "name", name="uq_classhub_competitions_course_id"),
        CheckConstraint(f"metric IN {_METRICS_SQL}", name="metric"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("classhub_courses.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    title: Mapped[str] = mapped_column(Text, default="")
    description: Mapped[str] = mapped_column(Text, default="")
    metric: Mapped[str] = mapped_column(String(16))
    public_fraction: Mapped[float] = mapped_column(Float)
    seed: Mapped[str] = mapped_column(String(64))
    labels_location: Mapped[str] = mapped_column(String(255))
    rows: Mapped[int]
    daily_limit: Mapped[int]
    anonymous: Mapped[bool] = mapped_column(default=False)
    opens_at: Mapped[datetime]
    ends_at: Mapped[datetime]
    created_at: Mapped[datetime]
    created_by: Mapped[str]

    course: Mapped[Course] = relationship()
    submissions: Mapped[list[CompetitionSubmission]] = relationship(
        back_populates="competition", cascade="all, delete-orphan", passive_deletes=True,
        order_by="CompetitionSubmission.id")


class CompetitionSubmission(Base):
    """One accepted predictions file, scored on both splits."""

    __tablename__ = "classhub_entries"
    __table_args__ = (Index("ix_classhub_entries_competition_student", "competition_id", "student"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    competition_id: Mapped[int] = mapped_column(
        ForeignKey("classhub_competitions.id", ondelete="CASCADE"))
    student: Mapped[str]
    submitted_at: Mapped[datetime]
    location: Mapped[str] = mapped_column(String(255))
    public_score: Mapped[float | None] = mapped_column(Float)
    private_score: Mapped[float | None] = mapped_column(Float)

    competition: Mapped[Competition] = relationship(back_populates="submissions")


def competition_json(c: Competition, course: str) -> dict[str, Any]:
    """What anyone in the course may see of a competition (no seed, no labels)."""
    return {
        "course": course,
        "name": c.name,
        "title": c.title,
        "description": c.description,
        "metric": c.metric,
        "public_fraction": c.public_fraction,
        "rows": c.rows,
        "daily_limit": c.daily_limit,
        "anonymous": c.anonymous,
        "opens_at": c.opens_at.isoformat(),
        "ends_at": c.ends_at.isoformat(),
        "created_at": c.created_at.isoformat(),
        "created_by": c.created_by,
    }


def entry_json(s: CompetitionSubmission, *, private: bool) -> dict[str, Any]:
    """A submission as its student (and staff) see it; the private score only when ``private``."""
    return {
        "id": s.id,
        "student": s.student,
        "submitted_at": s.submitted_at.isoformat(),
        "public_score": s.public_score,
        "private_score": s.private_score if private else None,
    }
