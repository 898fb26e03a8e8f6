"""REST handlers of distributed jobs: submit, list, show, logs, cancel.

Thin, like every handler: each method declares its action of hub_ext.core.authz (``@needs``, with
lookups of the job's course and owner) and its body model (``@takes``,
hub_ext.service.jobs.bodies) -> hub_ext.core.jobs checks what the job means (``@refuses`` makes
its sentences body_models.BodyError, a 400) -> `JobStore` records it -> the loop is woken. A job
someone may not see answers 404, the same as one that does not exist (docs/admins/security.md, "Security
model", rule 4).

- ``GET /api/jobs``: my jobs, and the jobs of the courses I teach or assist (all for admins);
  ``?course=``, ``?owner=``, ``?state=queued,running``, ``?offset=`` (0 to 2**62),
  ``?limit=`` (1 to 200).
- ``POST /api/jobs``: submit (hub_ext.service.jobs.bodies.JobSubmission); ``id`` makes it idempotent:
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
from hub_ext.service.apidoc import ok, op
from hub_ext.service.arguments import MAX_LOG_OFFSET, MAX_OFFSET, int_argument
from hub_ext.service.declare import needs, refuses, takes
from hub_ext.service.handlers import APIHandler
from hub_ext.service.jobs.bodies import JobSubmission
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

    _record: JobRecord | None = None
    _looked_up = False

    async def job_record(self, job_id: str) -> JobRecord | None:
        """The job ``job_id`` (None when there is none), read once per request."""
        if not self._looked_up:
            self._record = await asyncio.to_thread(self.jobs.store.get, job_id)
            self._looked_up = True
        return self._record

    def shown(self, record: JobRecord) -> dict[str, Any]:
        """The API's view of a job; a waiting job whose place the loop has not written yet (it
        is behind the head of its queue, docs/jobs-loop.md) shows its place at the last cycle."""
        out = as_json(record)
        if out["state"] == jobs.QUEUED and out["queue_position"] is None:
            out["queue_position"] = self.jobs.loop.position(record.job_id)
        return out

    @property
    def record(self) -> JobRecord:
        """The job the request is about, once `needs` allowed the caller to see it."""
        assert self._record is not None
        return self._record


async def _job_course(handler: _JobsHandler, arguments: dict[str, Any]) -> str | None:
    """The course of the job in the path (None: no such job), for `needs`."""
    record = await handler.job_record(arguments["job_id"])
    return None if record is None else record.course.name


async def _job_owner(handler: _JobsHandler, arguments: dict[str, Any]) -> str | None:
    record = await handler.job_record(arguments["job_id"])
    return None if record is None else record.owner


#: What `needs` asks about a job named in the path: its id, course and owner.
_THE_JOB = {"job": "job_id", "course": _job_course, "user": _job_owner}


def _query(name: str) -> Any:
    return lambda handler, _arguments: handler.get_query_argument(name, None)


async def _submitted_course(handler: JobsHandler, _arguments: dict[str, Any]) -> str | None:
    """The course a submitted job runs in: the body's, else the caller's only course (for
    `needs`; a hub service has none, and authz refuses it)."""
    caller = await handler.courses.caller(handler.require_user())
    given = handler.submitted().course
    return jobs.choose_course(given, caller.courses) if caller.is_user else given


def _submitted_priority(handler: JobsHandler, _arguments: dict[str, Any]) -> int:
    return handler.submitted().priority


class JobsHandler(_JobsHandler):
    """``GET /api/jobs`` lists, ``POST /api/jobs`` submits."""

    _submitted: JobSubmission | None = None

    def submitted(self) -> JobSubmission:
        """The body as a `JobSubmission` (400 naming the field when it is not one), parsed once
        for the lookups of `needs` (the course and priority authz decides on)."""
        if self._submitted is None:
            self._submitted = self.body_as(JobSubmission)
        return self._submitted

    @refuses(JobError)
    @needs(authz.LIST_JOBS, course=_query("course"), user=_query("owner"))
    async def get(self) -> None:
        states = jobs.parse_states(self.get_query_argument("state", None))
        offset = int_argument(self, "offset", 0, minimum=0, maximum=MAX_OFFSET)
        limit = int_argument(self, "limit", 50, minimum=1, maximum=MAX_PAGE)
        shown = authz.visible_jobs(self.caller, course=self.get_query_argument("course", None),
                                   owner=self.get_query_argument("owner", None))
        rows, total = await asyncio.to_thread(self.jobs.store.list, states=states, offset=offset,
                                              limit=limit, **shown)
        after = offset + len(rows)
        self.write_json({"jobs": [self.shown(r) for r in rows], "total": total, "offset": offset,
                         "limit": limit, "next_offset": after if after < total else None})

    @refuses(JobError)
    @needs(authz.SUBMIT_JOB, course=_submitted_course, priority=_submitted_priority)
    @takes(JobSubmission)
    async def post(self) -> None:
        caller, submission = self.caller, self.body.submission()
        course = jobs.choose_course(submission.course, caller.courses)
        fields, profiles = await resolve_profiles(self.hub, caller, course, submission.job_fields)
        submission = dataclasses.replace(submission, job_fields=fields)
        settings = self.jobs.settings
        now = datetime.now(timezone.utc)
        job = jobs.parse_job({**fields, "name": submission.name}, owner=caller.name, course=course,
                             submit_time=now.timestamp(),
                             default_max_runtime=settings.default_max_runtime,
                             max_runtime_limit=settings.max_runtime_limit)
        quotas = await asyncio.to_thread(self.jobs.limits, {course}, now)
        if course not in quotas:
            raise web.HTTPError(404, "No course %s; GET /api/courses lists the courses.", course)
        quota = quotas[course]
        nodes = await self.jobs.loop.known_nodes()  # the loop's live view: no cluster list per submit
        user_limits = quota.users.get(caller.name, (None, None))[0]
        refusal = refuse_at_submit(job, nodes, quota.limits, user_limits)
        if refusal:
            raise JobError(refusal)
        try:
            record, created = await asyncio.to_thread(self.jobs.store.submit, caller.name, course,
                                                      submission, job, now, profiles)
        except JobConflict as e:
            raise web.HTTPError(409, "%s", str(e)) from None
        self.jobs.loop.poke()
        self.write_json(as_json(record), 201 if created else 200)


class JobHandler(_JobsHandler):
    """``GET /api/jobs/<id>``: the job, its replicas and its history."""

    @needs(authz.READ_JOB, **_THE_JOB)
    async def get(self, job_id: str) -> None:
        self.write_json({**self.shown(self.record), "events": events_json(self.record.events)})


class JobCancelHandler(_JobsHandler):
    """``POST /api/jobs/<id>/cancel``: the owner, the course's teachers and admins."""

    @needs(authz.CANCEL_JOB, **_THE_JOB)
    async def post(self, job_id: str) -> None:
        now = datetime.now(timezone.utc)
        record = await asyncio.to_thread(self.jobs.store.request_stop, job_id, jobs.STOP_CANCEL,
                                         self.caller.name, now, f"cancel asked by {self.caller.name}")
        self.jobs.loop.poke()
        self.write_json(as_json(record), 202 if record.state in jobs.HOLDING else 200)


class JobLogsHandler(_JobsHandler):
    """``GET /api/jobs/<id>/logs``: one replica's log (text), from ``offset``; ``follow=1`` keeps
    sending until the replica has ended."""

    @refuses(JobError)
    @needs(authz.READ_JOB, **_THE_JOB)
    async def get(self, job_id: str) -> None:
        record = self.record
        index = int_argument(self, "index", 0, minimum=0, maximum=jobs.MAX_REPLICAS - 1)
        offset = int_argument(self, "offset", 0, minimum=0, maximum=MAX_LOG_OFFSET)
        follow = self.get_query_argument("follow", "0").lower() in ("1", "true", "yes")
        if not record.replicas:
            raise web.HTTPError(409, "Job %s has not started yet (%s); its logs begin when it "
                                "runs.", job_id, record.state)
        role, index = jobs.choose_replica(job_id, self.get_query_argument("role", None), index,
                                          [(r.role, r.index) for r in record.replicas])
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
                    errors=("400", "401", "403", "404", "409")),
    },
    "/api/jobs/{job}": {
        "get": op("One job: state, reason, queue position, replicas, history", _SEE,
                   ok("The job", _JOB), errors=("401", "403", "404"), params=("job",)),
    },
    "/api/jobs/{job}/cancel": {
        "post": op("Cancel a job", "the job's owner, the course's teachers, and hub admins",
                    {**ok("Cancelled (it was queued or had ended)", _JOB),
                     **ok("Stopping: its programs are asked to stop (SIGTERM), and stopped for good "
                          "after the grace period, c.ClasshubJobs.grace (SIGKILL)", _JOB, status="202")},
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
