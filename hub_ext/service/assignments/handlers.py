"""The assignments API: release, list, start, submit, collect (issue 34).

Thin handlers (docs/architecture.md, rule 3): who may do what is declared with ``@needs``
(hub_ext.core.authz's assignment actions), whether a submission is accepted and late is
hub_ext.core.assignments.judge on the service's clock, files are read and kept by
hub_ext.backends.submissions (off the event loop, rule 7), rows and the audit log are in the store.

- Starting an assignment is starting from its template version (hub_ext.service.templates.starting):
  the spawner seeds the home exactly as for a template, in both run modes.
- A student sees the course's assignments once they are open, and only their own submissions;
  an assignment not open yet, and a submission of someone else, are answered as missing (404).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from tornado import web

from hub_ext import store
from hub_ext.backends.local.accounts import safe_name
from hub_ext.backends.submissions import (
    ClasshubAssignments,
    Snapshot,
    SnapshotRefused,
    SubmissionStorage,
    submission_location,
)
from hub_ext.backends.templates import FILES, Stager
from hub_ext.core import assignments as rules
from hub_ext.core import authz
from hub_ext.core import templates as template_rules
from hub_ext.core.seeding import SeedLimits, TemplateRefused
from hub_ext.service.assignments.bodies import AssignmentBody, AssignmentChange
from hub_ext.service.declare import needs, refuses, takes
from hub_ext.service.templates.base import TemplatesBase
from hub_ext.service.templates.publishing import ContentsReader
from hub_ext.service.templates.starting import start_seeded
from hub_ext.store.assignment_models import (
    Assignment,
    Submission,
    assignment_json,
    autograde_json,
    submission_json,
)
from hub_ext.store.models import Course
from hub_ext.store.template_models import find_version, version_json

SUBMITTED = "assignment_submitted"
RELEASED = "assignment_released"
CHANGED = "assignment_changed"
DOWNLOADED = "submissions_downloaded"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def settings_of(app_settings: dict[str, Any]) -> ClasshubAssignments:
    """The service's ClasshubAssignments (its section of the configuration)."""
    if "classhub_assignments" not in app_settings:
        app_settings["classhub_assignments"] = ClasshubAssignments()
    return app_settings["classhub_assignments"]


def student_key(name: str) -> str:
    """A student's folder name in the submissions storage: a hash, never their chosen name."""
    return "u" + hashlib.sha256(name.encode()).hexdigest()[:16]


class AssignmentsBase(TemplatesBase):
    """Store access in a thread, the assignment lookup, and what a caller may see."""

    @property
    def assignments(self) -> ClasshubAssignments:
        return settings_of(self.settings)

    def _staff(self, course: str) -> bool:
        return bool(authz.decide(self.caller, authz.READ_SUBMISSIONS, course=course))

    def _assignment(self, session: Session, course: str, name: str, *, staff: bool) -> Assignment:
        """The assignment, or a 404 (also for a student when it is not open yet)."""
        row = session.scalars(select(Assignment).join(Course).where(
            Course.name == course, Assignment.name == name)).one_or_none()
        if row is None or (not staff and row.opens_at > _now()):
            raise web.HTTPError(404, f"No assignment {name} in {course}; GET "
                                     f"/api/courses/{course}/assignments lists them.")
        return row

    def _one(self, course: str, name: str, staff: bool) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            return self._with_submissions(session, self._assignment(session, course, name, staff=staff),
                                          course, staff)

    def _with_submissions(self, session: Session, a: Assignment, course: str, staff: bool) -> dict[str, Any]:
        return shown_with_submissions(a, course, self.caller.name, staff)


def shown_with_submissions(a: Assignment, course: str, caller: str, staff: bool) -> dict[str, Any]:
    """An assignment as the API and the course page show it to ``caller``: with their own
    submissions, whether it takes a submission now (and marks it late), and for staff how many
    students submitted."""
    shown = assignment_json(a, course)
    mine = [s for s in a.submissions if s.student == caller]
    shown["my_submissions"] = [submission_json(s, latest=s is mine[-1]) for s in mine]
    now = _now()
    verdict = rules.judge(_timing(a), now)
    shown["open"] = a.opens_at <= now
    shown["accepting"] = verdict.accepted
    shown["late_now"] = verdict.late
    if staff:
        shown["students_submitted"] = len({s.student for s in a.submissions})
    return shown


def course_assignments(sessions: Any, storage: Any, course: str, caller: str, staff: bool,
                       ) -> list[dict[str, Any]]:
    """The course page's assignments (in a worker thread): what the list endpoint answers, and
    for staff each student's last submission with its files and how many they made."""
    with sessions() as session:
        rows = session.scalars(select(Assignment).join(Course).where(Course.name == course)
                               .order_by(Assignment.due_at, Assignment.name)).all()
        found = []
        for a in rows:
            shown = shown_with_submissions(a, course, caller, staff)
            if not (staff or shown["open"]):
                continue
            if staff:
                shown["autograde"] = autograde_json(a.autograde)  # the settings form shows them
                last: dict[str, Submission] = {}
                counts: dict[str, int] = {}
                for s in a.submissions:
                    last[s.student] = s
                    counts[s.student] = counts.get(s.student, 0) + 1
                shown["submissions_table"] = [
                    {**submission_json(s, latest=True), "count": counts[student],
                     "listing": storage.listing(s.location) if storage is not None else []}
                    for student, s in sorted(last.items())]
            found.append(shown)
        return found


def _timing(a: Assignment) -> rules.Timing:
    return rules.Timing(a.opens_at, a.due_at, a.late_policy, a.cutoff_at)


class AssignmentListHandler(AssignmentsBase):
    """``GET|POST /api/courses/<course>/assignments``: the course's assignments; release one."""

    @needs(authz.READ_ASSIGNMENTS, course="course")
    async def get(self, course: str) -> None:
        self.write_json(await self.db(self._list, course, self._staff(course)))

    def _list(self, course: str, staff: bool) -> list[dict[str, Any]]:
        with self.settings["sessions"]() as session:
            self._course(session, course)
            rows = session.scalars(select(Assignment).join(Course).where(Course.name == course)
                                   .order_by(Assignment.due_at, Assignment.name)).all()
            now = _now()
            return [self._with_submissions(session, a, course, staff) for a in rows
                    if staff or a.opens_at <= now]

    @refuses(rules.AssignmentError)
    @needs(authz.EDIT_ASSIGNMENTS, course="course")
    @takes(AssignmentBody)
    async def post(self, course: str) -> None:
        body: AssignmentBody = self.body
        timing = rules.check_timing(rules.Timing(body.opens_at or _now(), body.due_at, body.late_policy,
                                                 body.cutoff_at))
        self.write_json(await self.db(self._release, course, body, timing), 201)

    def _release(self, course: str, body: AssignmentBody, timing: rules.Timing) -> dict[str, Any]:
        now = _now()
        try:
            with self.settings["sessions"].begin() as session:
                row = self._course(session, course)
                version = find_version(session, course, body.template, body.version)
                if version is None:
                    which = f"version {body.version} of " if body.version else ""
                    raise web.HTTPError(404, f"No {which}template {body.template} in {course}; publish "
                                             "it first (GET /api/courses/{course}/templates lists them).")
                a = Assignment(course_id=row.id, name=body.name, title=body.title, version=version,
                               folder=body.folder or body.name, opens_at=timing.opens_at,
                               due_at=timing.due_at, cutoff_at=timing.cutoff_at,
                               late_policy=timing.late_policy, created_at=now, created_by=self.caller.name)
                session.add(a)
                session.flush()
                shown = assignment_json(a, course)
                store.record(session, self.caller.name, RELEASED, now, course=course, assignment=a.name,
                             template=body.template, version=version.version)
                return shown
        except IntegrityError:
            raise web.HTTPError(409, f"{course} already has an assignment {body.name}; change it with "
                                     f"PUT /api/courses/{course}/assignments/{body.name}.") from None


class AssignmentHandler(AssignmentsBase):
    """``GET|PUT /api/courses/<course>/assignments/<name>``: one assignment; change its times."""

    @needs(authz.READ_ASSIGNMENTS, course="course")
    async def get(self, course: str, name: str) -> None:
        self.write_json(await self.db(self._one, course, name, self._staff(course)))

    @refuses(rules.AssignmentError)
    @needs(authz.EDIT_ASSIGNMENTS, course="course")
    @takes(AssignmentChange)
    async def put(self, course: str, name: str) -> None:
        self.write_json(await self.db(self._change, course, name, self.body))

    def _change(self, course: str, name: str, change: AssignmentChange) -> dict[str, Any]:
        now = _now()
        given = change.model_dump(exclude_unset=True)
        with self.settings["sessions"].begin() as session:
            a = self._assignment(session, course, name, staff=True)
            timing = rules.check_timing(rules.Timing(
                given.get("opens_at") or a.opens_at, given.get("due_at") or a.due_at,
                given.get("late_policy") or a.late_policy,
                given.get("cutoff_at", a.cutoff_at)))
            a.opens_at, a.due_at, a.late_policy, a.cutoff_at = (
                timing.opens_at, timing.due_at, timing.late_policy, timing.cutoff_at)
            if change.title is not None:
                a.title = change.title
            store.record(session, self.caller.name, CHANGED, now, course=course, assignment=name,
                         changed=sorted(given))
            return assignment_json(a, course)


class StartAssignmentHandler(AssignmentsBase):
    """``POST /api/courses/<course>/assignments/<name>/start``: (re)start my server with the
    assignment's template version seeded into my home (a re-seed keeps my edits)."""

    @refuses(template_rules.TemplateError)
    @needs(authz.START_ASSIGNMENT, course="course")
    async def post(self, course: str, name: str) -> None:
        version = await self.db(self._version, course, name)
        result = await start_seeded(self, version)
        result["assignment"] = name
        self.write_json(result)

    def _version(self, course: str, name: str) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            a = self._assignment(session, course, name, staff=self._staff(course))
            return version_json(course, a.version.template.name, a.version)


class SubmissionsHandler(AssignmentsBase):
    """``GET|POST /api/courses/<course>/assignments/<name>/submissions``.

    GET: staff see every submission (``?student=`` narrows it), a student their own. POST: submit
    my assignment folder now: the service snapshots it (limits, no link followed), times it with
    its own clock and marks it late by the assignment's policy; each submission is kept, the last
    one counts.
    """

    @needs(authz.READ_ASSIGNMENTS, course="course")
    async def get(self, course: str, name: str) -> None:
        staff = self._staff(course)
        student = self.get_query_argument("student", None) if staff else self.caller.name
        self.write_json(await self.db(self._list, course, name, staff, student))

    def _list(self, course: str, name: str, staff: bool, student: str | None) -> list[dict[str, Any]]:
        with self.settings["sessions"]() as session:
            a = self._assignment(session, course, name, staff=staff)
            rows = [s for s in a.submissions if student is None or s.student == student]
            latest = {s.student: s.id for s in rows}  # in id order: the last one wins
            return [submission_json(s, latest=latest[s.student] == s.id) for s in rows]

    @refuses(SnapshotRefused)
    @needs(authz.SUBMIT_ASSIGNMENT, course="course")
    async def post(self, course: str, name: str) -> None:
        now = _now()  # the submission's time: the service's clock when Submit reached it
        assignment_id, folder, timing = await self.db(self._accepting, course, name)
        verdict = rules.judge(timing, now)
        if not verdict.accepted:
            raise web.HTTPError(409, verdict.reason)
        storage = self.assignments.storage()
        location = submission_location(assignment_id, student_key(self.caller.name))
        if self.settings.get("mode") == "local":
            home = self._home(self.caller.name)  # resolved with the copy, in the worker thread
            taken = await asyncio.to_thread(storage.take, home, folder, location, self.assignments.limits)
        else:
            taken = await self._through_server(storage, folder, location)
        result = await self.db(self._record, course, name, assignment_id, now, verdict.late, location, taken)
        grading = self.settings.get("grading")
        if result.pop("autograded", False) and grading is not None:
            # graded as a job (hub_ext.service.assignments.grading); a grading that cannot start
            # says so in the submission's feedback, the submission is kept either way
            await grading.submit(result["id"], self.caller.name)
            result = await self.db(self._one_submission, result["id"])
        self.write_json(result, 201)

    def _one_submission(self, submission_id: int) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            return submission_json(session.get(Submission, submission_id), latest=True)

    async def _through_server(self, storage: SubmissionStorage, folder: str, location: str) -> Snapshot:
        """Kubernetes: the home is a volume of the student's pod, which the service does not
        mount. The folder is read through the student's own running server, with the student's
        own credentials (as a teacher's folder is read for publishing: ContentsReader), so the
        reading runs as the student and reaches nothing the student could not; the limits are
        charged before each file is written (Stager)."""
        url = await self.server_url("Your server is not running: start the assignment (or your server), "
                                    "then submit.")
        staged = await asyncio.to_thread(storage.staging)
        reader = ContentsReader(url, self.caller_token())
        limits = self.assignments.limits
        try:
            stager = await asyncio.to_thread(Stager, staged, SeedLimits(
                max_files=limits.max_files, max_bytes=limits.max_bytes, max_depth=limits.max_depth))
            await reader.copy_into(folder, stager)
            return await asyncio.to_thread(storage.keep_staged, staged / FILES, location, stager.bytes)
        except TemplateRefused as e:
            raise SnapshotRefused(f"Not submitted: {str(e).replace('template', 'folder')}; nothing was "
                                  "kept") from None
        except template_rules.TemplateError:
            raise SnapshotRefused(f"{folder!r} in your home is a file, not a folder") from None
        except web.HTTPError as e:
            if e.status_code == 404:
                raise SnapshotRefused(f"There is no folder {folder!r} in your home: start the "
                                      "assignment, or put your work there") from None
            raise
        finally:
            reader.client.close()
            await asyncio.to_thread(storage.discard, staged)

    def _home(self, user: str) -> Path:
        """The caller's home as the local spawner makes it (``<homes_dir>/<safe name>``)."""
        jobs = self.settings.get("jobs")
        homes = jobs.settings.homes_dir if jobs is not None else ""
        return Path(homes or "homes").absolute() / safe_name(user)

    def _accepting(self, course: str, name: str) -> tuple[int, str, rules.Timing]:
        with self.settings["sessions"]() as session:
            a = self._assignment(session, course, name, staff=self._staff(course))
            return a.id, a.folder, _timing(a)

    def _record(self, course: str, name: str, assignment_id: int, at: datetime, late: bool, location: str,
                taken: Any) -> dict[str, Any]:
        with self.settings["sessions"].begin() as session:
            row = Submission(assignment_id=assignment_id, student=self.caller.name, submitted_at=at,
                             late=late, location=location, files=taken.files, bytes=taken.bytes,
                             skipped=taken.skipped)
            session.add(row)
            session.flush()
            store.record(session, self.caller.name, SUBMITTED, at, course=course, assignment=name,
                         submission=row.id, late=late, files=taken.files, bytes=taken.bytes)
            autograded = bool(session.get(Assignment, assignment_id).autograde)
            return {**submission_json(row, latest=True), "autograded": autograded}


class SubmissionHandler(AssignmentsBase):
    """``GET /api/courses/<course>/assignments/<name>/submissions/<id>``: one submission and its
    files (its owner and the course's staff; anyone else: no such submission)."""

    @needs(authz.READ_ASSIGNMENTS, course="course")
    async def get(self, course: str, name: str, submission: str) -> None:
        row, location = await self.db(self._find, course, name, submission, self._staff(course))
        listing = await asyncio.to_thread(self.assignments.storage().listing, location)
        self.write_json({**row, "listing": listing})

    def _find(self, course: str, name: str, submission: str, staff: bool) -> tuple[dict[str, Any], str]:
        with self.settings["sessions"]() as session:
            a = self._assignment(session, course, name, staff=staff)
            found = next((s for s in a.submissions if str(s.id) == submission
                          and (staff or s.student == self.caller.name)), None)
            if found is None:
                raise web.HTTPError(404, f"No submission {submission} among those you can see; GET "
                                         f"/api/courses/{course}/assignments/{name}/submissions lists them.")
            latest = [s for s in a.submissions if s.student == found.student][-1] is found
            return submission_json(found, latest=latest), found.location


class SubmissionFileHandler(SubmissionHandler):
    """``GET .../submissions/<id>/files/<path>``: one file of a submission, read-only, as plain
    text (never rendered as a page: ``Content-Type: text/plain``, ``nosniff``, a sandbox)."""

    @needs(authz.READ_ASSIGNMENTS, course="course")
    async def get(self, course: str, name: str, submission: str, path: str) -> None:  # type: ignore[override]
        _, location = await self.db(self._find, course, name, submission, self._staff(course))
        data = await asyncio.to_thread(_read_snapshot_file, self.assignments.storage().files(location), path)
        if data is None:
            raise web.HTTPError(404, f"No file {path!r} in submission {submission}.")
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Content-Security-Policy", "sandbox; default-src 'none'")
        self.finish(data)


def _read_snapshot_file(base: Path, path: str) -> bytes | None:
    """A file of a snapshot by its relative path; None for anything else (``..``, a folder)."""
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\x00" in path:
        return None
    target = base.joinpath(*parts)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with open(fd, "rb") as f:
        return f.read() if stat.S_ISREG(os.fstat(fd).st_mode) else None


class DownloadHandler(AssignmentsBase):
    """``GET /api/courses/<course>/assignments/<name>/download``: every student's last submission
    as one zip (``<student>/<files>``; ``?all=1``: every submission, ``<student>/<id>/<files>``).
    The course's teachers, TAs and admins."""

    @needs(authz.READ_SUBMISSIONS, course="course")
    async def get(self, course: str, name: str) -> None:
        every = self.get_query_argument("all", "") in ("1", "true")
        entries = await self.db(self._entries, course, name, every)
        storage = self.assignments.storage()
        out = await asyncio.to_thread(_zipped, storage, entries)  # built off the loop (rule 7)
        try:
            self.set_header("Content-Type", "application/zip")
            self.set_header("Content-Disposition", f'attachment; filename="{course}-{name}.zip"')
            while chunk := await asyncio.to_thread(out.read, 1 << 20):
                self.write(chunk)
                await self.flush()
        finally:
            await asyncio.to_thread(out.close)
        self.finish()

    def _entries(self, course: str, name: str, every: bool) -> list[tuple[str, str]]:
        with self.settings["sessions"].begin() as session:
            a = self._assignment(session, course, name, staff=True)
            if every:
                chosen = [(f"{_zip_name(s.student)}/{s.id}", s.location) for s in a.submissions]
            else:
                last: dict[str, Submission] = {}
                for s in a.submissions:
                    last[s.student] = s
                chosen = [(_zip_name(student), s.location) for student, s in sorted(last.items())]
            store.record(session, self.caller.name, DOWNLOADED, _now(), course=course, assignment=name,
                         submissions=len(chosen), every=every)
            return chosen


def _zipped(storage: SubmissionStorage, entries: list[tuple[str, str]]) -> Any:
    """The zip of ``entries`` in an anonymous temporary file, rewound for reading."""
    out = tempfile.TemporaryFile()  # noqa: SIM115 - the caller reads it, then closes it
    try:
        storage.zip_into(out, entries)
        out.seek(0)
    except BaseException:
        out.close()
        raise
    return out


def _zip_name(student: str) -> str:
    """A student's folder in the archive: their name, with nothing a path could misread (a name
    that had to change gets a short hash, so two students never share a folder)."""
    shown = "".join(c if c.isalnum() or c in "._-@" else "_" for c in student).lstrip(".") or "_"
    return shown if shown == student else f"{shown}-{hashlib.sha256(student.encode()).hexdigest()[:6]}"
