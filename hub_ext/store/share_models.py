"""Store models for shares (issue 7). Tables are created by migration 0003.

Why classhub keeps its own records although JupyterHub has shares: the hub's share grants scopes
to a user or group and nothing else. What classhub promises on top needs a place of its own:
the kind (read-only or editable), the one path of a single-notebook share, the expiry of a
broadcast or link (hub shares never expire), whether following the share may start the owner's
server, and who accepted a link. These records are the truth for what was decided; the hub's
shares of a server are reconciled to match them (hub_ext.service.sharing), never the other way.

A link's code is stored as its sha256 only; the code itself is shown once, when it is made.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, CheckConstraint, ForeignKey, Index, String, UniqueConstraint, select
from sqlalchemy.orm import Mapped, Session, mapped_column, relationship

from hub_ext.store.models import Base, Course

__all__ = [
    "SHARE_KINDS", "SHARE_TARGETS", "Share", "ShareAcceptance", "SharingSettings", "ta_access_by_course",
]

SHARE_KINDS = ("read-only", "edit")
#: ``user`` and ``group`` become hub shares at once; a ``link`` becomes a user share for each
#: user who opens it (ShareAcceptance) while it is valid.
SHARE_TARGETS = ("user", "group", "link")


class Share(Base):
    """One share of an owner's server, as its owner (or an admin) decided it."""

    __tablename__ = "classhub_shares"
    __table_args__ = (
        CheckConstraint("kind IN ('read-only', 'edit')", name="kind"),
        CheckConstraint("target_kind IN ('user', 'group', 'link')", name="target_kind"),
        Index("ix_classhub_shares_owner_server", "owner", "server"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    owner: Mapped[str]
    server: Mapped[str] = mapped_column(default="")
    kind: Mapped[str] = mapped_column(String(16))
    target_kind: Mapped[str] = mapped_column(String(16))
    #: user or group name; "" for a link
    target: Mapped[str] = mapped_column(default="")
    #: normalised path relative to the server's root, or None for the whole server
    path: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    auto_start: Mapped[bool] = mapped_column(Boolean, default=False)
    code_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True, unique=True)
    created_at: Mapped[datetime]
    created_by: Mapped[str]
    expires_at: Mapped[datetime | None] = mapped_column(nullable=True)
    #: set when revoked, replaced or expired; the record stays for the audit trail
    ended_at: Mapped[datetime | None] = mapped_column(nullable=True, index=True)
    end_reason: Mapped[str | None] = mapped_column(String(16), nullable=True)

    acceptances: Mapped[list[ShareAcceptance]] = relationship(
        back_populates="share", cascade="all, delete-orphan", passive_deletes=True,
    )


class ShareAcceptance(Base):
    """A user who opened a link share (they hold a hub share while the link is valid)."""

    __tablename__ = "classhub_share_acceptances"
    __table_args__ = (UniqueConstraint("share_id", "user"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    share_id: Mapped[int] = mapped_column(ForeignKey("classhub_shares.id", ondelete="CASCADE"))
    user: Mapped[str]
    accepted_at: Mapped[datetime]

    share: Mapped[Share] = relationship(back_populates="acceptances")


class SharingSettings(Base):
    """A course's sharing choices. ``ta_server_access``: its TAs may open its students' servers
    without a share (through the course's TA role, made at hub start). No row: the hub-wide
    default (``configure(ta_server_access=...)``)."""

    __tablename__ = "classhub_sharing_settings"

    course_id: Mapped[int] = mapped_column(ForeignKey("classhub_courses.id", ondelete="CASCADE"),
                                           primary_key=True)
    ta_server_access: Mapped[bool] = mapped_column(Boolean)


def ta_access_by_course(session: Session) -> dict[str, bool]:
    """course name -> its ta_server_access, for the courses that chose one."""
    rows = session.execute(select(Course.name, SharingSettings.ta_server_access)
                           .join(SharingSettings, SharingSettings.course_id == Course.id))
    return {name: bool(value) for name, value in rows}
