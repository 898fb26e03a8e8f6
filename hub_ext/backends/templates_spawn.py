"""What a spawner does with templates: decide what to seed at a start, seed, record it.

Both spawners call :func:`resolve` from ``apply_user_options`` (before anything is created):
it checks the ``template`` spawn option against the store (the user must be a member of the
template's course, or an admin; the version must exist) or, without one, applies the course's
``on_start`` re-seed rule (hub_ext.core.templates.version_on_start). The result is a
:class:`SeedJob` of plain values. The local spawner then calls :func:`seed_local` before the
server process starts; the Kubernetes spawner runs the same engine in a container of the pod
(``python -m hub_ext.backends.templates_cli seed ...``, see
hub_ext.backends.kubernetes.templates).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from hub_ext import store
from hub_ext.backends.seeding import SeedResult, read_marker, seed_home
from hub_ext.backends.templates import TemplateStorage
from hub_ext.core import templates as rules
from hub_ext.core.authz import Caller
from hub_ext.core.seeding import SeedLimits
from hub_ext.store.assignment_models import hidden_from
from hub_ext.store.engine import read_connection
from hub_ext.store.models import AuditLog, Course, Membership
from hub_ext.store.template_models import TemplateSettings, find_version

__all__ = [
    "SEEDED",
    "SeedJob",
    "TemplateDenied",
    "course_roles",
    "last_seeded",
    "record_seeded",
    "resolve",
    "seed_local",
]

#: Audit action written after each seeding (the service's start call reports it).
SEEDED = "template_seeded"


class TemplateDenied(Exception):
    """A template option the user may not use, with the HTTP status and the sentence."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class SeedJob:
    """One seeding to do at this start (plain values: kept in the spawner, passed to a container)."""

    course: str
    name: str
    version: int
    location: str
    manifest_sha256: str
    files: int
    bytes: int
    profile: str | None
    image: str | None
    restore_deleted: bool = False
    only_if_from: str | None = None  # on_start re-seed: only when the home came from this template
    start_command: tuple[str, ...] | None = None  # the version's command for the server (Kubernetes)

    @property
    def key(self) -> str:
        return rules.template_key(self.course, self.name)


#: `course_roles`' statement, built once (a class start reads it per start).
_COURSE_ROLES = (select(Course.name, Membership.role, TemplateSettings.reseed)
                 .join(Membership, Membership.course_id == Course.id)
                 .outerjoin(TemplateSettings, TemplateSettings.course_id == Course.id)
                 .where(Membership.username == bindparam("username")))


def course_roles(db_url: str, username: str) -> tuple[dict[str, str], bool]:
    """The user's courses with their role in each (course -> role), and whether one of those
    courses re-seeds ``on_start``: only then may a start without a ``template`` option seed
    anything (:func:`resolve`).

    Why one read for both: a start needs the roles (the profile check, the course to charge),
    and most starts seed nothing and skip :func:`resolve`'s worker thread (at a class start, the
    thread's round trip was a tenth of a start's time in the hub, bench/storm.py). The read goes
    through the store's readers, which never wait on a writer; the spawner makes it on the
    store's threads (docs/architecture.md, rule 7: no database call on the hub's event loop, a
    PostgreSQL round trip included). As two reads it was two transactions (on PostgreSQL,
    three round trips each)."""
    with read_connection(store.shared(db_url)) as connection:  # rows, no ORM session: a start's CPU
        rows = connection.execute(_COURSE_ROLES, {"username": username}).all()
    return {name: role for name, role, _ in rows}, any(reseed == rules.ON_START for *_, reseed in rows)


def resolve(db_url: str, username: str, admin: bool, option: Any,
            home_marker: Callable[[], tuple[str, str] | None] | None = None,
            courses: Mapping[str, str] | None = None) -> SeedJob | None:
    """The seeding this start does, or None; :class:`TemplateDenied` for an option not allowed.

    ``option``: the ``template`` entry of user_options (None when absent). ``home_marker``: reads the
    (template key, version tag) the home was seeded from, when the spawner can read the home
    (called only for an ``on_start`` course; otherwise the audit log's last seeding is used).
    ``courses``: the user's course roles when the caller has just read them (None: read here).
    """
    choice = None
    if option is not None:
        try:
            choice = rules.TemplateChoice.parse(option)
        except rules.TemplateOptionError as e:
            raise TemplateDenied(400, f"Cannot start this server: {e}") from None
    with store.shared(db_url)() as session:
        if courses is None:
            courses = store.courses_of(session, username)
        caller = Caller(name=username, admin=admin, courses=courses)
        if choice is not None:
            verdict = rules.may_use(caller, choice.course)
            if not verdict:
                raise TemplateDenied(verdict.status, f"Cannot start this server: {verdict.message}")
        reseed = {
            course: mode for course, mode in session.execute(
                select(Course.name, TemplateSettings.reseed).join(
                    TemplateSettings, TemplateSettings.course_id == Course.id)
            ) if course in courses
        }
        seeded_from = None
        if choice is None:
            if rules.ON_START not in reseed.values():
                return None  # nothing to re-seed at a plain start: no need to look at the home
            seeded_from = (home_marker() if home_marker else None) or last_seeded(session, username)
        keys = {k for k in ((choice.key if choice else None), seeded_from[0] if seeded_from else None) if k}
        # a version only an assignment not open yet released is not the user's yet
        now = datetime.now(timezone.utc)
        latest: dict[str, int] = {}
        for key in keys:
            course, name = key.split("/", 1)
            newest = find_version(session, course, name, None, hidden_from(session, caller, course, now))
            if newest is not None:
                latest[key] = newest.version
        if choice is not None and choice.key not in latest:
            raise TemplateDenied(
                404, f"Cannot start this server: {choice.course} has no template {choice.name}.")
        decided = rules.version_on_start(choice, seeded_from, latest, reseed)
        if decided is None:
            return None
        key, number = decided
        course, name = key.split("/", 1)
        if choice is None and course not in courses and not admin:
            return None  # no longer a member: nothing is re-seeded
        version = find_version(session, course, name, number,
                               hidden_from(session, caller, course, now))
        if version is None:
            raise TemplateDenied(404, f"Cannot start this server: template {name} of {course} has no "
                                      f"version {number}.")
        return SeedJob(course, name, version.version, version.location, version.manifest_sha256,
                       version.files, version.bytes, version.profile, version.image,
                       restore_deleted=bool(choice and choice.restore_deleted),
                       only_if_from=None if choice is not None else key,
                       start_command=tuple(version.start_command) if version.start_command else None)


def last_seeded(session: Session, username: str) -> tuple[str, str] | None:
    """The template and version last seeded into ``username``'s home, from the audit log.

    For homes the spawner cannot read (a PVC on Kubernetes); the marker in the home stays the
    truth and the seeding command checks it before re-seeding.
    """
    entry = session.scalars(
        select(AuditLog).where(AuditLog.actor == username, AuditLog.action == SEEDED)
        .order_by(AuditLog.id.desc()).limit(1)
    ).first()
    if entry is None or not isinstance(entry.details, dict):
        return None
    key, version = entry.details.get("template"), entry.details.get("version")
    return (key, str(version)) if isinstance(key, str) and version is not None else None


def marker_of(home: str | Path) -> tuple[str, str] | None:
    """(template key, version tag) recorded in a home's marker, or None."""
    try:
        marker = read_marker(home)
    except (OSError, ValueError):
        return None
    return (marker.template, marker.version) if marker is not None else None


def seed_local(job: SeedJob, storage: TemplateStorage, home: str | Path, limits: SeedLimits, *,
               uid: int | None = None, gid: int | None = None) -> SeedResult | None:
    """Seed ``home`` with ``job`` (the local spawner, before the server starts).

    None when ``job`` is an on_start re-seed and the home was not seeded from that template.
    """
    if job.only_if_from is not None:
        found = marker_of(home)
        if found is None or found[0] != job.only_if_from:
            return None
    manifest = storage.manifest(job.location, job.manifest_sha256, limits)
    return seed_home(storage.files(job.location), manifest, home, template=job.key,
                     version=job.version, restore_deleted=job.restore_deleted, uid=uid, gid=gid)


def record_seeded(db_url: str, username: str, job: SeedJob, summary: dict[str, int] | None) -> None:
    """Audit one seeding (the start call of the service shows it to the student)."""
    with store.shared(db_url).begin() as session:
        store.record(session, username, SEEDED, datetime.now(timezone.utc), template=job.key,
                     version=job.version, course=job.course, summary=summary or {},
                     mode="local" if summary is not None else "container")


def job_json(job: SeedJob) -> dict[str, Any]:
    return asdict(job)

