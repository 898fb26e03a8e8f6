"""The competitions API: create, list, submit predictions, leaderboard (issue 34).

Thin handlers (docs/architecture.md, rule 3): who may do what is declared with ``@needs``
(hub_ext.core.authz's competition actions); parsing, the split, scores and ranks are
hub_ext.core.competitions' pure functions, run in a worker thread (rule 7) with the files kept by
hub_ext.backends.competitions; rows and the audit log are in the store.

- A predictions file is parsed strictly and scored before anything is kept: a refused file
  (too large, unknown, repeated or missing ids) is a 400 with the sentence what to change, and
  leaves no row, no file and no count against the daily limit.
- A competition is created (JSON), then its hidden labels are uploaded as a raw CSV (``PUT
  .../labels``), parsed off the event loop; until then students do not see it.
- A student sees the competitions once they are open and have labels, their own submissions (the private score
  only after the end) and the leaderboard of the split that counts now: public during the
  competition, private after it; staff see both at any time.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from tornado import web

from hub_ext import store
from hub_ext.backends.competitions import CompetitionStorage
from hub_ext.core import authz
from hub_ext.core import competitions as rules
from hub_ext.service.assignments.handlers import settings_of, student_key
from hub_ext.service.body_models import BodyError
from hub_ext.service.competitions.bodies import CompetitionBody, CompetitionChange
from hub_ext.service.declare import needs, refuses, takes
from hub_ext.service.templates.base import TemplatesBase
from hub_ext.store.competition_models import (
    Competition,
    CompetitionSubmission,
    competition_json,
    entry_json,
)
from hub_ext.store.models import Course

CREATED = "competition_created"
CHANGED = "competition_changed"
LABELS = "competition_labels"
SUBMITTED = "predictions_submitted"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def storage_of(app_settings: dict[str, Any]) -> CompetitionStorage:
    """Where the labels and predictions are kept: the ``competitions`` folder of the submissions
    storage (``c.ClasshubAssignments.storage_dir``)."""
    settings = settings_of(app_settings)
    if not settings.storage_dir:
        raise BodyError("Competition files are not kept on this hub: an admin sets "
                        "c.ClasshubAssignments.storage_dir.")
    return CompetitionStorage(settings.storage_dir)


def limits_of(app_settings: dict[str, Any]) -> rules.Limits:
    settings = settings_of(app_settings)
    return rules.Limits(max_bytes=settings.competition_max_bytes, max_rows=settings.competition_max_rows)


def _entries(c: Competition) -> list[rules.Entry]:
    return [rules.Entry(s.id, s.student, s.submitted_at, s.public_score, s.private_score)
            for s in c.submissions]


def _shown_name(c: Competition, student: str, caller: str, staff: bool) -> str:
    """A student's name on the leaderboard as ``caller`` sees it: the user name, or for an
    anonymous competition (to students) a stable pseudonym; one's own row is always one's name."""
    if staff or not c.anonymous or student == caller:
        return student
    return "participant " + hashlib.sha256(f"{c.seed}\x00{student}".encode()).hexdigest()[:6]


def _board(c: Competition, which: str, caller: str, staff: bool) -> list[dict[str, Any]]:
    counts: dict[str, int] = {}
    for s in c.submissions:
        counts[s.student] = counts.get(s.student, 0) + 1
    return [{"rank": rank, "student": _shown_name(c, e.student, caller, staff),
             "score": getattr(e, which), "submitted_at": e.submitted_at.isoformat(),
             "submissions": counts[e.student], "me": e.student == caller}
            for rank, e in rules.leaderboard(_entries(c), c.metric, which)]


def shown(c: Competition, course: str, caller: str, staff: bool) -> dict[str, Any]:
    """A competition as the API and the course page show it to ``caller``: with their own
    submissions, how many they have left today, and the leaderboard(s) they may see."""
    now = _now()
    ended = now > c.ends_at
    out = competition_json(c, course)
    mine = [s for s in c.submissions if s.student == caller]
    today = rules.day_start(now)
    out["open"] = c.opens_at <= now
    out["ended"] = ended
    out["has_labels"] = bool(c.labels_location)
    out["accepting"] = bool(c.labels_location) and not rules.window_verdict(c.opens_at, c.ends_at, now)
    out["higher_is_better"] = rules.higher_is_better(c.metric)
    out["my_submissions"] = [entry_json(s, private=ended or staff) for s in mine]
    out["left_today"] = max(0, c.daily_limit - sum(1 for s in mine if s.submitted_at >= today))
    out["leaderboard"] = {"shown": "private" if ended else "public",
                          "public": _board(c, "public", caller, staff) if staff or not ended else None,
                          "private": _board(c, "private", caller, staff) if staff or ended else None}
    if staff:
        out["students_submitted"] = len({s.student for s in c.submissions})
    return out


def course_competitions(sessions: Any, course: str, caller: str, staff: bool) -> list[dict[str, Any]]:
    """The course page's competitions (in a worker thread): what the list endpoint answers."""
    with sessions() as session:
        rows = session.scalars(select(Competition).join(Course).where(Course.name == course)
                               .order_by(Competition.ends_at, Competition.name)).all()
        return [shown(c, course, caller, staff) for c in rows if staff or _visible(c)]


def _visible(c: Competition) -> bool:
    """Whether students see ``c``: open, and its labels uploaded."""
    return bool(c.labels_location) and c.opens_at <= _now()


class CompetitionsBase(TemplatesBase):
    """Store access in a thread, the competition lookup, and what a caller may see."""

    def _staff(self, course: str) -> bool:
        return bool(authz.decide(self.caller, authz.READ_COMPETITION_SUBMISSIONS, course=course))

    def _competition(self, session: Session, course: str, name: str, *, staff: bool) -> Competition:
        """The competition, or a 404 (also for a student when it is not open yet)."""
        row = session.scalars(select(Competition).join(Course).where(
            Course.name == course, Competition.name == name)).one_or_none()
        if row is None or (not staff and not _visible(row)):
            raise web.HTTPError(404, f"No competition {name} in {course}; GET "
                                     f"/api/courses/{course}/competitions lists them.")
        return row


class CompetitionListHandler(CompetitionsBase):
    """``GET|POST /api/courses/<course>/competitions``: the course's competitions; create one."""

    @needs(authz.READ_COMPETITIONS, course="course")
    async def get(self, course: str) -> None:
        staff = self._staff(course)
        await self.db(self._check_course, course)
        self.write_json(await self.db(course_competitions, self.settings["sessions"], course,
                                      self.caller.name, staff))

    def _check_course(self, course: str) -> None:
        with self.settings["sessions"]() as session:
            self._course(session, course)

    @refuses(rules.CompetitionError)
    @needs(authz.EDIT_COMPETITIONS, course="course")
    @takes(CompetitionBody)
    async def post(self, course: str) -> None:
        body: CompetitionBody = self.body
        opens_at = body.opens_at or _now()
        rules.check_window(opens_at, body.ends_at)
        self.write_json(await self.db(self._create, course, body, opens_at), 201)

    def _create(self, course: str, body: CompetitionBody, opens_at: datetime) -> dict[str, Any]:
        now = _now()
        try:
            with self.settings["sessions"].begin() as session:
                row = self._course(session, course)
                c = Competition(course_id=row.id, name=body.name, title=body.title,
                                description=body.description, metric=body.metric,
                                public_fraction=body.public_fraction, seed=secrets.token_hex(16),
                                labels_location="", rows=0, daily_limit=body.daily_limit,
                                anonymous=body.anonymous, opens_at=opens_at, ends_at=body.ends_at,
                                created_at=now, created_by=self.caller.name)
                session.add(c)
                session.flush()
                store.record(session, self.caller.name, CREATED, now, course=course, competition=c.name,
                             metric=c.metric)
                return competition_json(c, course)
        except IntegrityError:
            raise web.HTTPError(409, f"{course} already has a competition {body.name}; choose another "
                                     "name.") from None


class CompetitionHandler(CompetitionsBase):
    """``GET|PUT /api/courses/<course>/competitions/<name>``: one competition, with the caller's
    submissions and the leaderboard(s) they may see; change its texts, times or limit."""

    @refuses(rules.CompetitionError)
    @needs(authz.EDIT_COMPETITIONS, course="course")
    @takes(CompetitionChange)
    async def put(self, course: str, name: str) -> None:
        await self.db(self._change, course, name, self.body)
        self.write_json(await self.db(self._one, course, name, True))

    def _change(self, course: str, name: str, change: CompetitionChange) -> None:
        given = change.model_dump(exclude_unset=True, exclude_none=True)
        with self.settings["sessions"].begin() as session:
            c = self._competition(session, course, name, staff=True)
            rules.check_window(given.get("opens_at", c.opens_at), given.get("ends_at", c.ends_at))
            for field, value in given.items():
                setattr(c, field, value)
            store.record(session, self.caller.name, CHANGED, _now(), course=course, competition=name,
                         changed=sorted(given))

    @needs(authz.READ_COMPETITIONS, course="course")
    async def get(self, course: str, name: str) -> None:
        self.write_json(await self.db(self._one, course, name, self._staff(course)))

    def _one(self, course: str, name: str, staff: bool) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            return shown(self._competition(session, course, name, staff=staff), course,
                         self.caller.name, staff)


class LeaderboardHandler(CompetitionHandler):
    """``GET /api/courses/<course>/competitions/<name>/leaderboard``: the leaderboard(s) only."""

    @needs(authz.READ_COMPETITIONS, course="course")
    async def get(self, course: str, name: str) -> None:
        self.write_json((await self.db(self._one, course, name, self._staff(course)))["leaderboard"])


def _csv_upload(handler: web.RequestHandler, what: str, header: str) -> bytes:
    """The CSV of a request: the raw body, or the multipart field "file"."""
    kind = handler.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        raise BodyError(f"The {what} are a CSV file ({header}); send it as the body (Content-Type "
                        'text/csv) or in the multipart field "file", not JSON.')
    files = handler.request.files.get("file")
    data = files[0]["body"] if files else handler.request.body
    if not data:
        raise BodyError(f"The {what} file is empty; send the CSV ({header}) as the body.")
    return data


class CsvUploadBase(CompetitionsBase):
    """A handler whose PUT/POST body is a CSV: it may be as large as
    ``c.ClasshubAssignments.competition_max_bytes`` (and a multipart envelope); a JSON body, which
    these refuse anyway, keeps the service's usual limit."""

    def prepare(self) -> Any:
        kind = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if self.request.method in ("PUT", "POST") and kind != "application/json":
            return self.start_body(settings_of(self.settings).competition_max_bytes + 64 * 1024)
        return super().prepare()


class LabelsHandler(CsvUploadBase):
    """``PUT /api/courses/<course>/competitions/<name>/labels``: upload (or, before the first
    submission, replace) the hidden labels: a raw CSV ``id,label``, parsed off the event loop and
    kept in the service's storage; never served back."""


    @refuses(rules.CompetitionError)
    @needs(authz.EDIT_COMPETITIONS, course="course")
    async def put(self, course: str, name: str) -> None:
        data = _csv_upload(self, "labels", "id,label")
        storage = storage_of(self.settings)
        cid, metric = await self.db(self._replaceable, course, name)
        labels = await asyncio.to_thread(rules.parse_labels, data, metric, limits_of(self.settings))
        location = await asyncio.to_thread(storage.keep_labels, cid, data)
        try:
            old = await self.db(self._keep, course, name, location, len(labels))
        except BaseException:
            await asyncio.to_thread(storage.remove, location)
            raise
        if old:
            await asyncio.to_thread(storage.remove, old)
        self.write_json(await self.db(self._one, course, name))

    def _replaceable(self, course: str, name: str) -> tuple[int, str]:
        with self.settings["sessions"]() as session:
            c = self._competition(session, course, name, staff=True)
            self._unscored(c)
            return c.id, c.metric

    @staticmethod
    def _unscored(c: Competition) -> None:
        if c.submissions:
            raise web.HTTPError(409, f"{c.name} already has scored submissions; its labels can no longer "
                                     "change (the scores would not mean the same). Create a new "
                                     "competition instead.")

    def _keep(self, course: str, name: str, location: str, rows: int) -> str:
        with self.settings["sessions"].begin() as session:
            c = session.scalars(select(Competition).join(Course).where(
                Course.name == course, Competition.name == name).with_for_update()).one()
            self._unscored(c)
            old, c.labels_location, c.rows = c.labels_location, location, rows
            store.record(session, self.caller.name, LABELS, _now(), course=course, competition=name,
                         rows=rows)
            return old

    def _one(self, course: str, name: str) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            return shown(self._competition(session, course, name, staff=True), course, self.caller.name, True)


def _scored(storage: CompetitionStorage, labels_location: str, data: bytes, metric: str, seed: str,
            fraction: float, limits: rules.Limits) -> tuple[float | None, float | None]:
    """(public score, private score) of a predictions file, or a CompetitionError (in a thread)."""
    labels = rules.parse_labels(storage.read(labels_location), metric, rules.Limits(
        max_bytes=2**62, max_rows=2**62, max_field=2**62))  # the teacher's, checked when created
    predicted = rules.parse_predictions(data, labels, metric, limits)
    public, private = rules.split(labels, seed, fraction)
    return rules.score(metric, labels, predicted, public), rules.score(metric, labels, predicted, private)


class SubmissionsHandler(CsvUploadBase):
    """``GET|POST /api/courses/<course>/competitions/<name>/submissions``.

    GET: staff see every submission with both scores, a student their own (the private score
    after the end). POST: a predictions CSV (raw body or multipart field "file"), scored now."""


    @needs(authz.READ_COMPETITIONS, course="course")
    async def get(self, course: str, name: str) -> None:
        self.write_json(await self.db(self._list, course, name, self._staff(course)))

    def _list(self, course: str, name: str, staff: bool) -> list[dict[str, Any]]:
        with self.settings["sessions"]() as session:
            c = self._competition(session, course, name, staff=staff)
            ended = _now() > c.ends_at
            return [entry_json(s, private=staff or ended) for s in c.submissions
                    if staff or s.student == self.caller.name]

    @refuses(rules.CompetitionError)
    @needs(authz.SUBMIT_PREDICTIONS, course="course")
    async def post(self, course: str, name: str) -> None:
        now = _now()  # the submission's time: the service's clock when the file reached it
        data = _csv_upload(self, "predictions", "id,prediction")
        storage = storage_of(self.settings)
        cid, metric, seed, fraction, labels_location = await self.db(self._accepting, course, name, now)
        public, private = await asyncio.to_thread(_scored, storage, labels_location, data, metric, seed,
                                                  fraction, limits_of(self.settings))
        location = await asyncio.to_thread(storage.keep_predictions, cid, student_key(self.caller.name), data)
        try:
            result = await self.db(self._record, course, name, cid, now, location, public, private)
        except BaseException:
            await asyncio.to_thread(storage.remove, location)
            raise
        self.write_json(result, 201)

    def _used_today(self, session: Session, cid: int, now: datetime) -> int:
        return session.scalar(select(func.count()).select_from(CompetitionSubmission).where(
            CompetitionSubmission.competition_id == cid,
            CompetitionSubmission.student == self.caller.name,
            CompetitionSubmission.submitted_at >= rules.day_start(now))) or 0

    def _accepting(self, course: str, name: str, now: datetime) -> tuple[int, str, str, float, str]:
        with self.settings["sessions"]() as session:
            c = self._competition(session, course, name, staff=self._staff(course))
            self._check(session, c, now)
            return c.id, c.metric, c.seed, c.public_fraction, c.labels_location

    def _check(self, session: Session, c: Competition, now: datetime) -> None:
        """409 with the sentence when the window is closed or today's submissions are used up."""
        if not c.labels_location:
            raise web.HTTPError(409, f"{c.name} has no hidden labels yet; its teacher uploads them "
                                     f"(PUT .../competitions/{c.name}/labels).")
        reason = rules.window_verdict(c.opens_at, c.ends_at, now)
        if reason:
            raise web.HTTPError(409, reason)
        if self._used_today(session, c.id, now) >= c.daily_limit:
            raise web.HTTPError(409, f"You have used all {c.daily_limit} submissions of today (UTC) for "
                                     f"{c.name}; submit again after midnight UTC.")

    def _record(self, course: str, name: str, cid: int, at: datetime, location: str,
                public: float | None, private: float | None) -> dict[str, Any]:
        with self.settings["sessions"].begin() as session:
            # the competition's row locked (PostgreSQL), then the limit counted again: two files
            # sent at once cannot both take the last submission of the day
            c = session.scalars(select(Competition).where(Competition.id == cid).with_for_update()).one()
            self._check(session, c, at)
            row = CompetitionSubmission(competition_id=cid, student=self.caller.name, submitted_at=at,
                                        location=location, public_score=public, private_score=private)
            session.add(row)
            session.flush()
            store.record(session, self.caller.name, SUBMITTED, at, course=course, competition=name,
                         submission=row.id, public_score=public)
            return entry_json(row, private=False)


class PredictionsFileHandler(CompetitionsBase):
    """``GET .../competitions/<name>/submissions/<id>/file``: a predictions file as it was sent,
    as plain text: to its student and the course's staff (anyone else: no such submission)."""

    @needs(authz.READ_COMPETITIONS, course="course")
    async def get(self, course: str, name: str, submission: str) -> None:
        location = await self.db(self._find, course, name, submission, self._staff(course))
        data = await asyncio.to_thread(storage_of(self.settings).read, location)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Content-Security-Policy", "sandbox; default-src 'none'")
        self.finish(data)

    def _find(self, course: str, name: str, submission: str, staff: bool) -> str:
        with self.settings["sessions"]() as session:
            c = self._competition(session, course, name, staff=staff)
            found = next((s for s in c.submissions if str(s.id) == submission
                          and (staff or s.student == self.caller.name)), None)
            if found is None:
                raise web.HTTPError(404, f"No submission {submission} among those you can see; GET "
                                         f"/api/courses/{course}/competitions/{name}/submissions lists them.")
            return found.location
