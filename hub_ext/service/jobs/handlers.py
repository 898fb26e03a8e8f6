"""REST handlers of distributed jobs: submit, list, show, logs, cancel.

Thin, like every handler: who asks (HubOAuth) -> hub_ext.core.authz -> hub_ext.core.jobs checks the
input -> `JobStore` records it -> the loop is woken. A job someone may not see answers 404, the
same as one that does not exist (README, "Security model", rule 4).

- ``GET /api/jobs``: my jobs, and the jobs of the courses I teach or assist (all for admins);
  ``?course=``, ``?owner=``, ``?state=queued,running``, ``?offset=`` (0 to 2**62),
  ``?limit=`` (1 to 200).
- ``POST /api/jobs``: submit (hub_ext.core.jobs.parse_submission); ``id`` makes it idempotent:
  201 for a new job, 200 with the job when the same id was submitted before. A ``profile``
  (per job, or per role) is resolved like a notebook's (hub_ext.service.jobs.profiles).
- ``GET /api/jobs/<id>``: state, reason, queue position, estimated start, replicas, history.
- ``GET /api/jobs/<id>/logs?role=worker&index=0&offset=0&follow=1``: a replica's log as text
  from byte ``offset`` (0 to 2**62); ``index`` is 0 to 1023; ``follow`` keeps the answer open
  until the replica ends.
- ``POST /api/jobs/<id>/cancel``: stop it (queued: at once; running: SIGTERM, grace, SIGKILL).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timezone
from typing import Any

from tornado import web
from tornado.iostream import StreamClosedError

from hub_ext.core import authz, jobs
from hub_ext.core.admission import refuse_at_submit
from hub_ext.core.jobs import JobError
from hub_ext.core.roles import TEACHER
from hub_ext.service.apidoc import json_body, ok, op
from hub_ext.service.arguments import MAX_LOG_OFFSET, MAX_OFFSET, int_argument
from hub_ext.service.handlers import APIHandler
from hub_ext.service.jobs.loop import launch_of
from hub_ext.service.jobs.profiles import resolve_profiles
from hub_ext.service.jobs.records import JobConflict, as_json, events_json
from hub_ext.service.jobs.settings import JobService
from hub_ext.store.job_models import JobRecord

__all__ = ["OPENAPI_PARAMETERS", "OPENAPI_PATHS", "ROUTES"]

_ID = r"([^/]+)"
MAX_PAGE = 200
LOG_CHUNK = 256 * 1024


class _JobsHandler(APIHandler):
    @property
    def jobs(self) -> JobService:
        service = self.settings.get("jobs")
        if service is None:
            raise web.HTTPError(404, "Distributed jobs are not enabled on this hub.")
        return service

    async def _caller(self) -> authz.Caller:
        caller = await self.courses.caller(self.require_user())
        if not caller.is_user:
            raise web.HTTPError(403, "Jobs belong to users; ask with a user's token.")
        return caller

    async def _visible(self, caller: authz.Caller, job_id: str, action: str) -> JobRecord:
        """The job, if `caller` may do `action` on it; 404 otherwise (whether or not it exists)."""
        record = await asyncio.to_thread(self.jobs.store.get, job_id)
        if record is None or not authz.decide(caller, authz.READ_JOB, course=record.course.name,
                                              user=record.owner):
            raise web.HTTPError(404, "No job %s among the jobs you can see; GET /api/jobs lists them.",
                                job_id)
        verdict = authz.decide(caller, action, course=record.course.name, user=record.owner)
        if not verdict:
            raise web.HTTPError(verdict.status, verdict.message)
        return record


class JobsHandler(_JobsHandler):
    """``GET /api/jobs`` lists, ``POST /api/jobs`` submits."""

    async def get(self) -> None:
        caller = await self._caller()
        course = self.get_query_argument("course", None)
        owner = self.get_query_argument("owner", None)
        states = self._states()
        offset, limit = self._page()
        if course is not None:
            verdict = authz.decide(caller, authz.READ_COURSE_JOBS, course=course)
            if not verdict and owner != caller.name:
                raise web.HTTPError(verdict.status, verdict.message)
        kwargs: dict[str, Any] = {"states": states, "offset": offset, "limit": limit}
        if caller.is_admin:
            kwargs.update(owner=owner, courses=[course] if course else None)
        elif course is not None and authz.decide(caller, authz.READ_COURSE_JOBS, course=course):
            kwargs.update(owner=owner, courses=[course])
        elif course is not None:
            kwargs.update(owner=caller.name, courses=[course])
        else:
            staff = [c for c in caller.courses if authz.decide(caller, authz.READ_COURSE_JOBS, course=c)]
            if owner is not None and owner != caller.name:
                kwargs.update(owner=owner, courses=staff)
            else:
                kwargs.update(owner=caller.name, courses=staff if owner is None else None,
                              either=owner is None)
        rows, total = await asyncio.to_thread(self.jobs.store.list, **kwargs)
        after = offset + len(rows)
        self.write_json({"jobs": [as_json(r) for r in rows], "total": total, "offset": offset,
                         "limit": limit, "next_offset": after if after < total else None})

    def _states(self) -> list[str] | None:
        raw = self.get_query_argument("state", None)
        if raw is None or raw == "":
            return None
        states = [s.strip() for s in raw.split(",") if s.strip()]
        bad = [s for s in states if s not in jobs.STATES]
        if bad:
            raise web.HTTPError(400, "state %r is not one of %s.", bad[0], ", ".join(jobs.STATES))
        return states

    def _page(self) -> tuple[int, int]:
        offset = int_argument(self, "offset", 0, minimum=0, maximum=MAX_OFFSET)
        limit = int_argument(self, "limit", 50, minimum=1, maximum=MAX_PAGE)
        return offset, limit

    async def post(self) -> None:
        caller = await self._caller()
        try:
            submission = jobs.parse_submission(self.json_body())
        except JobError as e:
            raise web.HTTPError(400, "%s.", str(e).rstrip(".")) from None
        course = submission.course or self._only_course(caller)
        verdict = authz.decide(caller, authz.SUBMIT_JOB, course=course)
        if not verdict:
            raise web.HTTPError(verdict.status, verdict.message)
        fields = dict(submission.job_fields)
        if fields.get("priority", 0) not in (0, None) and not (
                caller.is_admin or caller.role_in(course) == TEACHER):
            raise web.HTTPError(403, "Only teachers of %s and hub admins set a job's priority; "
                                "leave priority out.", course)
        fields, profiles = await resolve_profiles(self.hub, caller, course, fields)
        submission = dataclasses.replace(submission, job_fields=fields)
        settings = self.jobs.settings
        now = datetime.now(timezone.utc)
        try:
            job = jobs.parse_job({**fields, "name": submission.name}, owner=caller.name, course=course,
                                 submit_time=now.timestamp(),
                                 default_max_runtime=settings.default_max_runtime,
                                 max_runtime_limit=settings.max_runtime_limit)
        except JobError as e:
            raise web.HTTPError(400, "%s.", str(e).rstrip(".")) from None
        quotas = await asyncio.to_thread(self.jobs.limits, {course}, now)
        if course not in quotas:
            raise web.HTTPError(404, "No course %s; GET /api/courses lists the courses.", course)
        quota = quotas[course]
        nodes = await self.jobs.backend.nodes({})
        user_limits = quota.users.get(caller.name, (None, None))[0]
        refusal = refuse_at_submit(job, nodes, quota.limits, user_limits)
        if refusal:
            raise web.HTTPError(400, "%s", refusal)
        try:
            record, created = await asyncio.to_thread(self.jobs.store.submit, caller.name, course,
                                                      submission, job, now, profiles)
        except JobConflict as e:
            raise web.HTTPError(409, "%s", str(e)) from None
        self.jobs.loop.poke()
        self.write_json(as_json(record), 201 if created else 200)

    @staticmethod
    def _only_course(caller: authz.Caller) -> str:
        courses = sorted(caller.courses)
        if len(courses) == 1:
            return courses[0]
        if not courses:
            raise web.HTTPError(400, "Jobs run in a course, and you are in none; ask your teacher "
                                "to add you, or name the course with \"course\".")
        raise web.HTTPError(400, "You are in several courses (%s); say which one with \"course\".",
                            ", ".join(courses))


class JobHandler(_JobsHandler):
    """``GET /api/jobs/<id>``: the job, its replicas and its history."""

    async def get(self, job_id: str) -> None:
        caller = await self._caller()
        record = await self._visible(caller, job_id, authz.READ_JOB)
        self.write_json({**as_json(record), "events": events_json(record.events)})


class JobCancelHandler(_JobsHandler):
    """``POST /api/jobs/<id>/cancel``: the owner, the course's teachers and admins."""

    async def post(self, job_id: str) -> None:
        caller = await self._caller()
        await self._visible(caller, job_id, authz.CANCEL_JOB)
        now = datetime.now(timezone.utc)
        record = await asyncio.to_thread(self.jobs.store.request_stop, job_id, jobs.STOP_CANCEL,
                                         caller.name, now, f"cancel asked by {caller.name}")
        self.jobs.loop.poke()
        self.write_json(as_json(record), 202 if record.state in jobs.HOLDING else 200)


class JobLogsHandler(_JobsHandler):
    """``GET /api/jobs/<id>/logs``: one replica's log (text), from ``offset``; ``follow=1`` keeps
    sending until the replica has ended."""

    async def get(self, job_id: str) -> None:
        caller = await self._caller()
        record = await self._visible(caller, job_id, authz.READ_JOB)
        role = self.get_query_argument("role", None)
        index = int_argument(self, "index", 0, minimum=0, maximum=jobs.MAX_REPLICAS - 1)
        offset = int_argument(self, "offset", 0, minimum=0, maximum=MAX_LOG_OFFSET)
        follow = self.get_query_argument("follow", "0").lower() in ("1", "true", "yes")
        replicas = {(r.role, r.index) for r in record.replicas}
        if role is None and record.replicas:
            role = record.replicas[0].role
        if (role, index) not in replicas:
            if not replicas:
                raise web.HTTPError(409, "Job %s has not started yet (%s); its logs begin when it "
                                    "runs.", job_id, record.state)
            names = ", ".join(f"role={r}&index={i}" for r, i in sorted(replicas))
            raise web.HTTPError(400, "No replica %s-%s in job %s; choose one of: %s.", role, index,
                                job_id, names)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        launch = launch_of(record)
        while True:
            data = await self.jobs.backend.logs(launch, role, index, offset, LOG_CHUNK)
            if data:
                offset += len(data)
                self.write(data)
                try:
                    await self.flush()
                except StreamClosedError:
                    return
                if len(data) == LOG_CHUNK:
                    continue
            if not follow:
                break
            record = await asyncio.to_thread(self.jobs.store.get, job_id)
            replica = None if record is None else next(
                (r for r in record.replicas if (r.role, r.index) == (role, index)), None)
            if replica is None or replica.state not in ("pending", "running"):
                data = await self.jobs.backend.logs(launch, role, index, offset, LOG_CHUNK)
                if data:
                    self.write(data)
                break
            await asyncio.sleep(0.5)
        self.finish()


ROUTES: list[tuple[str, type]] = [
    ("api/jobs", JobsHandler),
    (f"api/jobs/{_ID}", JobHandler),
    (f"api/jobs/{_ID}/cancel", JobCancelHandler),
    (f"api/jobs/{_ID}/logs", JobLogsHandler),
]

_REPLICA = {"type": "object", "properties": {
    "role": {"type": "string"}, "index": {"type": "integer"}, "rank": {"type": "integer"},
    "state": {"type": "string", "enum": ["pending", "running", "succeeded", "failed", "killed", "lost"]},
    "node": {"type": ["string", "null"]}, "exit_code": {"type": ["integer", "null"]},
    "restarts": {"type": "integer"}, "gpus": {"type": "array", "items": {"type": "string"}}}}
_JOB = {"type": "object", "properties": {
    "id": {"type": "string"}, "client_id": {"type": ["string", "null"]}, "name": {"type": "string"},
    "owner": {"type": "string"}, "course": {"type": "string"},
    "state": {"type": "string", "enum": list(jobs.STATES)},
    "reason_code": {"type": ["string", "null"]}, "reason": {"type": ["string", "null"]},
    "queue_position": {"type": ["integer", "null"]},
    "estimated_start": {"type": ["string", "null"], "format": "date-time"},
    "command": {"type": "array", "items": {"type": "string"}},
    "roles": {"type": "array", "items": {"type": "object"}},
    "profile": {"type": ["string", "null"],
                "description": "the display name of the profile every role named, if one"},
    "profiles": {"type": "object", "description": "role -> the profile it named", "additionalProperties": {
        "type": "object", "properties": {"slug": {"type": "string"}, "display_name": {"type": "string"},
                                         "summary": {"type": "string"}}}},
    "replicas": {"type": "array", "items": _REPLICA},
    "events": {"type": "array", "items": {"type": "object", "properties": {
        "at": {"type": "string"}, "state": {"type": "string"}, "message": {"type": "string"}}}}}}
_LIST = {"type": "object", "properties": {
    "jobs": {"type": "array", "items": _JOB}, "total": {"type": "integer"},
    "offset": {"type": "integer"}, "limit": {"type": "integer"},
    "next_offset": {"type": ["integer", "null"]}}}
_SUBMIT = {"type": "object", "additionalProperties": False, "required": ["command"], "properties": {
    "id": {"type": "string", "maxLength": 100, "description": "your idempotency key"},
    "course": {"type": "string"}, "name": {"type": "string", "maxLength": 63},
    "command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "env": {"type": "object", "additionalProperties": {"type": "string"}},
    "workdir": {"type": "string"}, "replicas": {"type": "integer", "minimum": 1},
    "resources": {"type": "object"}, "gpu_product": {"type": "string"},
    "profile": {"type": "string", "maxLength": 63, "description": (
        "a profile of the course (its slug, as in the spawn form): every replica gets what a "
        "notebook of that profile gets (CPU, memory, GPUs, node selection); not with resources "
        "or gpu_product. With roles, give it per role instead")},
    "roles": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "replicas": {"type": "integer", "minimum": 1},
        "resources": {"type": "object"}, "gpu_product": {"type": "string"},
        "profile": {"type": "string", "description": "this role's profile, in place of resources"}}}},
    "main_role": {"type": "string"},
    "priority": {"type": "integer"}, "max_runtime": {"type": "number"},
    "success": {"type": "string", "enum": ["all", "main"]},
    "tolerated_failures": {"type": "integer"}, "max_restarts": {"type": "integer"}},
    "example": {"id": "run-1", "name": "resnet-ddp", "command": ["python", "train.py"],
                "replicas": 2, "resources": {"nvidia.com/gpu": 1}, "max_runtime": 3600}}
_SEE = "the job's owner, the course's teachers and TAs, and hub admins"

#: Parameters of the job operations, added to the document's components.
OPENAPI_PARAMETERS: dict[str, Any] = {
    "job": {"name": "job", "in": "path", "required": True, "schema": {"type": "string"},
            "description": "a job's id (from POST /api/jobs)"},
    "log_role": {"name": "role", "in": "query", "required": False, "schema": {"type": "string"},
                 "description": "the replica's role (default: the first)"},
    "log_index": {"name": "index", "in": "query", "required": False,
                  "schema": {"type": "integer", "minimum": 0, "maximum": jobs.MAX_REPLICAS - 1,
                             "default": 0}},
    "log_offset": {"name": "offset", "in": "query", "required": False,
                   "schema": {"type": "integer", "minimum": 0, "maximum": MAX_LOG_OFFSET, "default": 0},
                   "description": "the byte to start from"},
    "page_offset": {"name": "offset", "in": "query", "required": False,
                    "schema": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
                    "description": "how many jobs to skip (next_offset of the previous page)"},
    "page_limit": {"name": "limit", "in": "query", "required": False,
                   "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 50},
                   "description": "the most jobs on the page"},
    "log_follow": {"name": "follow", "in": "query", "required": False,
                   "schema": {"type": "boolean", "default": False},
                   "description": "keep the answer open until the replica ends"},
}

OPENAPI_PATHS: dict[str, Any] = {
    "/api/jobs": {
        "get": op("List jobs", "any hub user: their own jobs, the jobs of the courses they teach or "
                   "assist; hub admins all", ok("A page of jobs, newest first", _LIST),
                   errors=("400", "401", "403"), params=("page_offset", "page_limit")),
        "post": op("Submit a distributed job", "members of the course",
                    {**ok("The new job, queued", _JOB, status="201"),
                     **ok("The job submitted before with the same id", _JOB)},
                    errors=("400", "401", "403", "404", "409"), body=json_body(_SUBMIT)),
    },
    "/api/jobs/{job}": {
        "get": op("One job: state, reason, queue position, replicas, history", _SEE,
                   ok("The job", _JOB), errors=("401", "403", "404"), params=("job",)),
    },
    "/api/jobs/{job}/cancel": {
        "post": op("Cancel a job", "the job's owner, the course's teachers, and hub admins",
                    {**ok("Cancelled (it was queued or had ended)", _JOB),
                     **ok("Stopping: its replicas get SIGTERM, then SIGKILL after the grace period",
                          _JOB, status="202")},
                    errors=("401", "403", "404"), params=("job",)),
    },
    "/api/jobs/{job}/logs": {
        "get": op("A replica's log", _SEE,
                   {"200": {"description": "The log from offset (text)",
                            "content": {"text/plain": {"schema": {"type": "string"}}}}},
                   errors=("400", "401", "403", "404", "409"),
                   params=("job", "log_role", "log_index", "log_offset", "log_follow")),
    },
}
