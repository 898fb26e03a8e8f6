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
- A notebook (``POST .../notebooks``, when the teacher set a runner) and any file of a
  competition with a teacher's scoring script run as jobs (hub_ext.service.competitions.runs):
  the submission is answered 202 and pending; it holds one of the day's submissions until it
  fails (then it gives it back) or is scored (then it ranks).
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
from hub_ext.backends import autograde
from hub_ext.backends.competitions import CompetitionStorage
from hub_ext.core import authz
from hub_ext.core import competitions as rules
from hub_ext.core import grading as G
from hub_ext.core.jobs import JobError
from hub_ext.service.assignments.handlers import settings_of, student_key
from hub_ext.service.body_models import BodyError
from hub_ext.service.competitions.bodies import CompetitionBody, CompetitionChange, NotebookRunner, ScorerBody
from hub_ext.service.competitions.runs import NOTEBOOK, SCORE, CompetitionRuns
from hub_ext.service.declare import needs, refuses, takes
from hub_ext.service.jobs.profiles import resolve_profiles
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
NOTEBOOK_SUBMITTED = "notebook_submitted"
RUNNER_SET = "competition_runner_set"
SCORER_SET = "competition_scorer_set"
RESCORE = "competition_rescore"


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


def runs_of(app_settings: dict[str, Any]) -> CompetitionRuns:
    """The service's runner of competition jobs (it needs the job service)."""
    found = app_settings.get("competition_runs")
    if found is None:
        raise web.HTTPError(503, "Notebook submissions and scoring scripts need the job service, which "
                                 "this service does not run.")
    return found


def limits_of(app_settings: dict[str, Any]) -> rules.Limits:
    settings = settings_of(app_settings)
    return rules.Limits(max_bytes=settings.competition_max_bytes, max_rows=settings.competition_max_rows)


def _entries(c: Competition) -> list[rules.Entry]:
    """The scored submissions: a pending or failed one never ranks."""
    return [rules.Entry(s.id, s.student, s.submitted_at, s.public_score, s.private_score)
            for s in c.submissions if s.state == rules.SCORED]


def higher(c: Competition) -> bool:
    """The ranking's direction: the teacher's scoring script's, else the built-in metric's."""
    return bool(c.scorer["higher_is_better"]) if c.scorer else rules.higher_is_better(c.metric)


def counts_today(s: CompetitionSubmission, today: datetime) -> bool:
    """Whether a submission uses one of the day's submissions: sent today and not failed (a
    pending one holds its place; a failed one, like a refused file, gives it back)."""
    return s.submitted_at >= today and s.state != rules.FAILED


def _shown_name(c: Competition, student: str, caller: str, staff: bool) -> str:
    """A student's name on the leaderboard as ``caller`` sees it: the user name, or for an
    anonymous competition (to students) a stable pseudonym; one's own row is always one's name."""
    if staff or not c.anonymous or student == caller:
        return student
    return "participant " + hashlib.sha256(f"{c.seed}\x00{student}".encode()).hexdigest()[:6]


def _board(c: Competition, which: str, caller: str, staff: bool) -> list[dict[str, Any]]:
    counts: dict[str, int] = {}
    for s in c.submissions:
        if s.state == rules.SCORED:
            counts[s.student] = counts.get(s.student, 0) + 1
    return [{"rank": rank, "student": _shown_name(c, e.student, caller, staff),
             "score": getattr(e, which), "submitted_at": e.submitted_at.isoformat(),
             "submissions": counts[e.student], "me": e.student == caller}
            for rank, e in rules.leaderboard(_entries(c), c.metric, which, higher(c))]


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
    out["higher_is_better"] = higher(c)
    out["scored_by"] = "script" if c.scorer else c.metric
    out["takes_notebooks"] = bool(c.runner)
    out["predictions_file"] = (c.runner or {}).get("predictions_file")
    out["my_submissions"] = [entry_json(s, private=ended or staff, staff=staff) for s in mine]
    out["left_today"] = max(0, c.daily_limit - sum(1 for s in mine if counts_today(s, today)))
    out["leaderboard"] = {"shown": "private" if ended else "public",
                          "public": _board(c, "public", caller, staff) if staff or not ended else None,
                          "private": _board(c, "private", caller, staff) if staff or ended else None}
    if staff:
        out["students_submitted"] = len({s.student for s in c.submissions})
        # what a crash or a broken scoring script ended: staff re-run them from the page
        out["failed"] = [entry_json(s, private=True, staff=True) for s in c.submissions
                         if s.state == rules.FAILED]
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


class _SubmittingBase(CsvUploadBase):
    """What a submission of either kind checks and records: the window, the daily limit (under
    the competition's lock), the pending row of a file or notebook that runs as a job."""

    def _has_scorer(self, cid: int) -> bool:
        with self.settings["sessions"]() as session:
            return bool(session.get(Competition, cid).scorer)

    async def _run(self, course: str, name: str, cid: int, now: datetime, kind: str, data: bytes,
                   stage: str) -> None:
        """Keep the file, record a pending submission (the limit counted again, under the
        competition's lock), start its job and answer 202 with it."""
        storage = storage_of(self.settings)
        runs = runs_of(self.settings)
        keep = storage.keep_notebook if kind == NOTEBOOK else storage.keep_predictions
        location = await asyncio.to_thread(keep, cid, student_key(self.caller.name), data)
        try:
            entry_id = await self.db(self._record_pending, course, name, cid, now, kind, location)
        except BaseException:
            await asyncio.to_thread(storage.remove, location)
            raise
        await runs.start(entry_id, stage)
        self.write_json(await self.db(self._entry, entry_id), 202)

    def _record_pending(self, course: str, name: str, cid: int, at: datetime, kind: str,
                        location: str) -> int:
        with self.settings["sessions"].begin() as session:
            c = session.scalars(select(Competition).where(Competition.id == cid).with_for_update()).one()
            self._check(session, c, at)
            row = CompetitionSubmission(
                competition_id=cid, student=self.caller.name, submitted_at=at, kind=kind,
                location="" if kind == NOTEBOOK else location, state=rules.PENDING,
                message="Waiting for its job to start.",
                run={"notebook": location} if kind == NOTEBOOK else {})
            session.add(row)
            session.flush()
            store.record(session, self.caller.name, NOTEBOOK_SUBMITTED if kind == NOTEBOOK else SUBMITTED,
                         at, course=course, competition=name, submission=row.id, public_score=None)
            return row.id

    def _entry(self, entry_id: int) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            return entry_json(session.get(CompetitionSubmission, entry_id), private=False)

    def _used_today(self, session: Session, cid: int, now: datetime) -> int:
        return session.scalar(select(func.count()).select_from(CompetitionSubmission).where(
            CompetitionSubmission.competition_id == cid,
            CompetitionSubmission.student == self.caller.name,
            CompetitionSubmission.state != rules.FAILED,
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


class SubmissionsHandler(_SubmittingBase):
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
            return [entry_json(s, private=staff or ended, staff=staff) for s in c.submissions
                    if staff or s.student == self.caller.name]

    @refuses(rules.CompetitionError)
    @needs(authz.SUBMIT_PREDICTIONS, course="course")
    async def post(self, course: str, name: str) -> None:
        now = _now()  # the submission's time: the service's clock when the file reached it
        data = _csv_upload(self, "predictions", "id,prediction")
        storage = storage_of(self.settings)
        cid, metric, seed, fraction, labels_location = await self.db(self._accepting, course, name, now)
        if await self.db(self._has_scorer, cid):  # the teacher's script scores it, in the sandbox
            limit = limits_of(self.settings).max_bytes
            if len(data) > limit:
                raise rules.CompetitionError(f"The predictions file has {len(data)} bytes, more than the "
                                             f"{limit} this competition takes; send a smaller file.")
            await self._run(course, name, cid, now, "predictions", data, SCORE)
            return
        public, private = await asyncio.to_thread(_scored, storage, labels_location, data, metric, seed,
                                                  fraction, limits_of(self.settings))
        location = await asyncio.to_thread(storage.keep_predictions, cid, student_key(self.caller.name), data)
        try:
            result = await self.db(self._record, course, name, cid, now, location, public, private)
        except BaseException:
            await asyncio.to_thread(storage.remove, location)
            raise
        self.write_json(result, 201)


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
            if not found.location:
                raise web.HTTPError(404, f"Submission {submission} has no predictions file (yet): its "
                                         "notebook has not written one.")
            return found.location


class NotebookHandler(_SubmittingBase):
    """``POST /api/courses/<course>/competitions/<name>/notebooks``: submit a notebook (the raw
    ``.ipynb`` as the body, or the multipart field "file"). It is checked to be a notebook, kept,
    and run as a job in the grading sandbox; the predictions file it writes is scored. Answered
    202 with the pending submission; its state and sentence say how it ends."""

    def prepare(self) -> Any:
        # a notebook comes as application/x-ipynb+json (or a multipart upload); a body declared
        # application/json keeps the service's usual JSON limit, as on every other endpoint
        kind = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if self.request.method == "POST" and kind != "application/json":
            return self.start_body(settings_of(self.settings).competition_notebook_max_bytes + 64 * 1024)
        return CompetitionsBase.prepare(self)

    @refuses(rules.CompetitionError, G.GradingError)
    @needs(authz.SUBMIT_PREDICTIONS, course="course")
    async def post(self, course: str, name: str) -> None:
        now = _now()
        files = self.request.files.get("file")
        data = files[0]["body"] if files else self.request.body
        if not data:
            raise BodyError("The notebook is empty; send the .ipynb file as the body.")
        limit = settings_of(self.settings).competition_notebook_max_bytes
        if len(data) > limit:
            raise rules.CompetitionError(f"The notebook has {len(data)} bytes, more than the {limit} this "
                                         "hub takes; clear its outputs and submit again.")
        cid, *_ = await self.db(self._accepting, course, name, now)
        if not await self.db(self._takes_notebooks, cid):
            raise web.HTTPError(409, f"{name} takes predictions files only; its teacher can let it take "
                                     f"notebooks (PUT .../competitions/{name}/runner).")
        await asyncio.to_thread(autograde.read_notebook, data, "The submitted file")
        await self._run(course, name, cid, now, NOTEBOOK, data, NOTEBOOK)

    def _takes_notebooks(self, cid: int) -> bool:
        with self.settings["sessions"]() as session:
            return bool(session.get(Competition, cid).runner)


def runner_json(runner: dict[str, Any] | None) -> dict[str, Any]:
    """A competition's notebook settings as staff see them (no job fields)."""
    if not runner:
        return {"takes_notebooks": False}
    return {"takes_notebooks": True, "profile": runner["profile"], "time_limit": runner["time_limit"],
            "memory_mib": (runner.get("memory") or 0) // 2**20 or None,
            "predictions_file": runner["predictions_file"], "owner": runner["owner"]}


def scorer_json(scorer: dict[str, Any] | None, source: str | None = None) -> dict[str, Any]:
    """A competition's scoring script settings as staff see them (with the script's text)."""
    if not scorer:
        return {"scored_by": "metric"}
    out = {"scored_by": "script", "higher_is_better": scorer["higher_is_better"],
           "profile": scorer["profile"], "time_limit": scorer["time_limit"],
           "memory_mib": (scorer.get("memory") or 0) // 2**20 or None, "owner": scorer["owner"],
           "set_at": scorer["set_at"]}
    if source is not None:
        out["source"] = source
    return out


class _JobSettingsBase(CompetitionsBase):
    async def _fields(self, course: str, profile: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The job fields of ``profile``, resolved with the teacher's own rights."""
        return await resolve_profiles(self.hub, self.caller, course, {
            "roles": [{"name": "grader", "replicas": 1, "profile": profile}]})


class RunnerHandler(_JobSettingsBase):
    """``GET|PUT|DELETE .../competitions/<name>/runner``: whether (and how) the competition takes
    notebooks that run as jobs and write the predictions file."""

    @needs(authz.READ_COMPETITION_SUBMISSIONS, course="course")
    async def get(self, course: str, name: str) -> None:
        self.write_json(await self.db(self._settings, course, name))

    def _settings(self, course: str, name: str) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            return runner_json(self._competition(session, course, name, staff=True).runner)

    @refuses(rules.CompetitionError, JobError)
    @needs(authz.EDIT_COMPETITIONS, course="course")
    @takes(NotebookRunner)
    async def put(self, course: str, name: str) -> None:
        body: NotebookRunner = self.body
        runs_of(self.settings)
        fields, kept = await self._fields(course, body.profile)
        settings = {"profile": body.profile, "time_limit": body.time_limit,
                    "memory": body.memory_mib * 2**20 if body.memory_mib else None,
                    "predictions_file": body.predictions_file, "owner": self.caller.name,
                    "fields": fields, "profiles": {k: dict(v) for k, v in kept.items()}}
        self.write_json(await self.db(self._set, course, name, settings))

    @needs(authz.EDIT_COMPETITIONS, course="course")
    async def delete(self, course: str, name: str) -> None:
        self.write_json(await self.db(self._set, course, name, None))

    def _set(self, course: str, name: str, settings: dict[str, Any] | None) -> dict[str, Any]:
        with self.settings["sessions"].begin() as session:
            c = self._competition(session, course, name, staff=True)
            c.runner = settings
            store.record(session, self.caller.name, RUNNER_SET, _now(), course=course, competition=name,
                         profile=(settings or {}).get("profile"),
                         predictions_file=(settings or {}).get("predictions_file"))
            return runner_json(settings)


def _check_script(source: str) -> None:
    """A CompetitionError unless ``source`` parses as Python and defines score() at its top
    level. Only parsed here (ast), never run: it runs in the sandbox."""
    import ast

    try:
        tree = ast.parse(source, "scorer.py")
    except SyntaxError as e:
        raise rules.CompetitionError(f"The scoring script is not valid Python (line {e.lineno}: {e.msg}); "
                                     "fix it and upload it again.") from None
    if not any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == "score"
               for n in tree.body):
        raise rules.CompetitionError("The scoring script defines no function score(labels_path, "
                                     "predictions_path) at its top level; define it and return a float.")


class ScorerHandler(_JobSettingsBase):
    """``GET|PUT|DELETE .../competitions/<name>/scorer``: the teacher's scoring script (staff
    read it back; students never), replaceable until the first scored submission."""

    @needs(authz.READ_COMPETITION_SUBMISSIONS, course="course")
    async def get(self, course: str, name: str) -> None:
        self.write_json(await self.db(self._settings, course, name))

    def _settings(self, course: str, name: str) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            scorer = self._competition(session, course, name, staff=True).scorer
        source = storage_of(self.settings).read(scorer["location"]).decode() if scorer else None
        return scorer_json(scorer, source)

    @refuses(rules.CompetitionError, JobError)
    @needs(authz.EDIT_COMPETITIONS, course="course")
    @takes(ScorerBody)
    async def put(self, course: str, name: str) -> None:
        body: ScorerBody = self.body
        runs_of(self.settings)
        await asyncio.to_thread(_check_script, body.source)
        fields, kept = await self._fields(course, body.profile)
        storage = storage_of(self.settings)
        cid = await self.db(self._unscored, course, name)
        location = await asyncio.to_thread(storage.keep_scorer, cid, body.source.encode())
        settings = {"location": location, "higher_is_better": body.higher_is_better,
                    "profile": body.profile, "time_limit": body.time_limit,
                    "memory": body.memory_mib * 2**20 if body.memory_mib else None,
                    "owner": self.caller.name, "set_at": _now().isoformat(),
                    "fields": fields, "profiles": {k: dict(v) for k, v in kept.items()}}
        try:
            old = await self.db(self._set, course, name, settings)
        except BaseException:
            await asyncio.to_thread(storage.remove, location)
            raise
        if old:
            await asyncio.to_thread(storage.remove, old)
        self.write_json(scorer_json(settings, body.source))

    @needs(authz.EDIT_COMPETITIONS, course="course")
    async def delete(self, course: str, name: str) -> None:
        await self.db(self._unscored, course, name)
        old = await self.db(self._set, course, name, None)
        if old:
            await asyncio.to_thread(storage_of(self.settings).remove, old)
        self.write_json(scorer_json(None))

    def _unscored(self, course: str, name: str) -> int:
        with self.settings["sessions"]() as session:
            c = self._competition(session, course, name, staff=True)
            _no_scores(c)
            return c.id

    def _set(self, course: str, name: str, settings: dict[str, Any] | None) -> str:
        with self.settings["sessions"].begin() as session:
            c = session.scalars(select(Competition).join(Course).where(
                Course.name == course, Competition.name == name).with_for_update()).one()
            _no_scores(c)
            old = (c.scorer or {}).get("location", "")
            c.scorer = settings
            store.record(session, self.caller.name, SCORER_SET, _now(), course=course, competition=name,
                         scored_by="script" if settings else c.metric)
            return old


def _no_scores(c: Competition) -> None:
    if any(s.state == rules.SCORED for s in c.submissions):
        raise web.HTTPError(409, f"{c.name} already has scored submissions; its scoring can no longer "
                                 "change (the scores would not mean the same). Create a new competition "
                                 "instead.")


class RescoreHandler(CompetitionsBase):
    """``POST .../competitions/<name>/submissions/<id>/rescore``: staff run a failed or pending
    submission again (its notebook, or its scoring script on its kept predictions): nothing a
    crash or a broken script ended is lost."""

    @needs(authz.EDIT_COMPETITIONS, course="course")
    async def post(self, course: str, name: str, submission: str) -> None:
        entry_id, stage = await self.db(self._stage, course, name, submission)
        runs = runs_of(self.settings)
        await runs.start(entry_id, stage)
        self.write_json(await self.db(self._shown, entry_id), 202)

    def _shown(self, entry_id: int) -> dict[str, Any]:
        with self.settings["sessions"]() as session:
            return entry_json(session.get(CompetitionSubmission, entry_id), private=True, staff=True)

    def _stage(self, course: str, name: str, submission: str) -> tuple[int, str]:
        with self.settings["sessions"].begin() as session:
            c = self._competition(session, course, name, staff=True)
            s = next((s for s in c.submissions if str(s.id) == submission), None)
            if s is None:
                raise web.HTTPError(404, f"No submission {submission} of {name}.")
            if s.state == rules.SCORED:
                raise web.HTTPError(409, f"Submission {submission} is scored already; its score stays.")
            if s.state == rules.PENDING and (s.run or {}).get("sandbox"):
                raise web.HTTPError(409, f"Submission {submission} is running; wait for its result.")
            stage = SCORE if s.location else NOTEBOOK
            if stage == SCORE and not c.scorer:
                raise web.HTTPError(409, f"Submission {submission}'s predictions are scored by the "
                                         "built-in metric, which needs no job; it was refused for its "
                                         "content.")
            store.record(session, self.caller.name, RESCORE, _now(), course=course, competition=name,
                         submission=s.id, student=s.student, stage=stage)
            return s.id, stage
