"""Store models for course templates (issue 6). Tables are created by migration 0002.

Why these shapes:
- A template belongs to one course and has a name unique in it; its versions are numbered 1, 2, ...
  and never change once written (a student's marker names a version: that version must keep
  meaning the same files).
- The files themselves live in the template storage (a folder under the data dir, or a
  ReadWriteMany volume on Kubernetes) at ``location``; the database keeps what was decided: who
  published what, when, with which image/profile/start command, and the sha256 of the stored
  manifest, so a spawner can check the storage still holds exactly what was published.
- ``TemplateSettings`` holds per-course choices (re-seed on start or only on request).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    String,
    Text,
    UniqueConstraint,
    false,
    select,
)
from sqlalchemy.orm import Mapped, Session, mapped_column, relationship

from hub_ext.store.models import Base, Course
from hub_ext.store.types import JSONType

__all__ = [
    "RESEED_MODES", "Template", "TemplateSettings", "TemplateVersion", "find_template", "find_version",
    "reseed_mode", "version_json",
]

#: ``manual``: students re-seed with a REST call or the button; ``on_start``: every server start
#: seeds the newest version of the template the home was seeded from.
RESEED_MODES = ("manual", "on_start")


class Template(Base):
    """A named template of a course; its content is in its versions."""

    __tablename__ = "classhub_templates"
    __table_args__ = (UniqueConstraint("course_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("classhub_courses.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    created_by: Mapped[str]

    course: Mapped[Course] = relationship()
    versions: Mapped[list[TemplateVersion]] = relationship(
        back_populates="template", cascade="all, delete-orphan", passive_deletes=True,
        order_by="TemplateVersion.version",
    )


class TemplateVersion(Base):
    """One immutable published version: where its files are and how to start a server for it."""

    __tablename__ = "classhub_template_versions"
    __table_args__ = (
        UniqueConstraint("template_id", "version"),
        CheckConstraint("version >= 1", name="version"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    template_id: Mapped[int] = mapped_column(ForeignKey("classhub_templates.id", ondelete="CASCADE"))
    version: Mapped[int]
    description: Mapped[str] = mapped_column(Text, default="")
    image: Mapped[str | None]
    profile: Mapped[str | None] = mapped_column(String(64))
    start_command: Mapped[list[str] | None] = mapped_column(JSONType, default=None)  # argv
    source: Mapped[str] = mapped_column(Text)  # "server:<path>" or "archive:<file name>"
    location: Mapped[str] = mapped_column(String(255))  # relative to the template storage root
    manifest_sha256: Mapped[str] = mapped_column(String(64))
    files: Mapped[int]
    bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime]
    created_by: Mapped[str]
    staff_only: Mapped[bool] = mapped_column(default=False, server_default=false())
    """Only the course's staff see it until an assignment using it opens (an exam prepared ahead:
    hub_ext.store.assignment_models.held_back); otherwise the course's as soon as published."""

    template: Mapped[Template] = relationship(back_populates="versions")


class TemplateSettings(Base):
    """Per-course template settings. No row: the defaults (``reseed = "manual"``)."""

    __tablename__ = "classhub_template_settings"
    __table_args__ = (CheckConstraint("reseed IN ('manual', 'on_start')", name="reseed"),)

    course_id: Mapped[int] = mapped_column(
        ForeignKey("classhub_courses.id", ondelete="CASCADE"), primary_key=True
    )
    reseed: Mapped[str] = mapped_column(String(16), default="manual")


# ---------------------------------------------------------------------------------------------
# Queries shared by the service and the spawners (one place that knows the shape above).


def find_template(session: Session, course: str, name: str) -> Template | None:
    return session.scalars(
        select(Template).join(Course).where(Course.name == course, Template.name == name)
    ).one_or_none()


def find_version(session: Session, course: str, name: str, version: int | None,
                 hidden: Collection[int] = ()) -> TemplateVersion | None:
    """Version ``version`` of ``course/name`` (the newest when None), or None; a version whose id
    is in ``hidden`` (what the asker may not see yet: hub_ext.store.assignment_models.held_back)
    is none."""
    query = (select(TemplateVersion).join(Template).join(Course)
             .where(Course.name == course, Template.name == name))
    if hidden:
        query = query.where(TemplateVersion.id.not_in(list(hidden)))
    if version is None:
        query = query.order_by(TemplateVersion.version.desc()).limit(1)
    else:
        query = query.where(TemplateVersion.version == version)
    return session.scalars(query).first()


def reseed_mode(session: Session, course: str) -> str:
    setting = session.scalars(
        select(TemplateSettings).join(Course, Course.id == TemplateSettings.course_id)
        .where(Course.name == course)
    ).one_or_none()
    return setting.reseed if setting is not None else RESEED_MODES[0]


def version_json(course: str, name: str, v: TemplateVersion, held: Collection[int] = ()) -> dict[str, Any]:
    """The version as the API and pages show it; ``held``: the versions the course's students do
    not see yet (hub_ext.store.assignment_models.held_back), for ``students_see``."""
    return {
        "course": course,
        "template": name,
        "version": v.version,
        "tag": f"v{v.version}",
        "description": v.description,
        "image": v.image,
        "profile": v.profile,
        "start_command": v.start_command,
        "source": v.source,
        "files": v.files,
        "bytes": v.bytes,
        "created_at": v.created_at.isoformat(),
        "created_by": v.created_by,
        "staff_only": v.staff_only,
        "students_see": v.id not in held,
    }
