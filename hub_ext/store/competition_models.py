"""Store models for competitions and their submissions (issue 34). Tables are created by
migration 0010; notebook runs and scoring scripts by 0012.

Why these shapes:
- A competition belongs to one course and has a name unique in it. Its hidden labels are a file
  in the service's own storage (mode 0700; ``labels_location``, made of ids only), never a column
  a listing could leak. ``seed`` fixes which ids are public (hub_ext.core.competitions.split): a
  secret of the service, never shown to students.
- An entry (a submission) row is written for an accepted file, or for a notebook (or a file a
  teacher's scoring script scores) while its job runs (``state`` pending). Public and private
  scores are computed once, so changing the end time later does not rescore; the submission's time
  is the service's clock when it arrived (the tie-break), not when its job ended. A failed one keeps
  its sentence (``message``) and its files; it neither ranks nor counts against the daily limit.
- ``runner`` (notebook submissions) and ``scorer`` (a teacher's script) are settings documents,
  as an assignment's ``autograde``: the job fields are resolved once, with the teacher's rights.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Float, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from hub_ext.core.competitions import METRICS, SCORED
from hub_ext.store.models import Base, Course
from hub_ext.store.types import JSONType

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
    #: notebook submissions: {"profile", "time_limit", "memory", "predictions_file", "owner",
    #: "fields", "profiles"}; None: only predictions files are taken
    runner: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    #: a teacher's scoring script: {"location", "higher_is_better", "owner", "set_at"}; None: the
    #: built-in metric scores
    scorer: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)

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
    #: "predictions" (a file sent) or "notebook" (a notebook run as a job writes the file)
    kind: Mapped[str] = mapped_column(String(16), default="predictions", server_default="predictions")
    state: Mapped[str] = mapped_column(String(16), default=SCORED, server_default=SCORED)
    #: why it failed (shown to its student), or where it waits
    message: Mapped[str] = mapped_column(Text, default="", server_default="")
    #: the jobs' bookkeeping: stage, job id and name, nonce, sandbox, the notebook's location,
    #: and a staff-only detail of a scoring script's failure
    run: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)

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


def entry_json(s: CompetitionSubmission, *, private: bool, staff: bool = False) -> dict[str, Any]:
    """A submission as its student (and staff) see it; the private score only when ``private``;
    a scoring script's own error text only for ``staff`` (it may quote the hidden labels)."""
    out = {
        "id": s.id,
        "student": s.student,
        "submitted_at": s.submitted_at.isoformat(),
        "kind": s.kind,
        "state": s.state,
        "message": s.message,
        "has_file": bool(s.location),
        "public_score": s.public_score,
        "private_score": s.private_score if private else None,
    }
    run = s.run or {}
    if staff and run.get("detail"):
        out["detail"] = run["detail"]
    if run.get("job_name"):
        out["job"] = run["job_name"]
    return out
