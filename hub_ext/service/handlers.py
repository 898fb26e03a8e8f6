"""REST handlers of the classhub service. Thin: identify the caller, ask core, answer JSON.

Every handler that acts on something first asks hub_ext.core.authz whether the caller may (a pure
decision), then calls one method of hub_ext.service.courses, which owns the store transactions
and the hub group sync.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from jupyterhub.services.auth import HubOAuthenticated, UserNotAllowed
from prometheus_client import CONTENT_TYPE_LATEST
from tornado import web

from hub_ext import __version__
from hub_ext.core import authz, roles
from hub_ext.service import metrics, openapi, servers
from hub_ext.service.courses import Courses, course_name_problem
from hub_ext.service.hubapi import HubAPI


class APIHandler(HubOAuthenticated, web.RequestHandler):
    """Base for API handlers: JSON errors, and 401/403 instead of redirects for API clients."""

    @property
    def hub(self) -> HubAPI:
        return self.settings["hub_api"]

    @property
    def courses(self) -> Courses:
        return self.settings["courses"]

    def json_body(self) -> Any:
        """The JSON request body; 400 when it is not JSON."""
        try:
            return json.loads(self.request.body or b"null")
        except ValueError:
            raise web.HTTPError(400, "The body must be JSON (Content-Type: application/json).") from None

    async def authorize(self, action: str, **about: str) -> authz.Caller:
        """Who asks (401/403 when nobody, or a token without access) and whether they may do
        `action`; 403 with authz's sentence otherwise."""
        caller = await self.courses.caller(self.require_user())
        verdict = authz.decide(caller, action, **about)
        if not verdict:
            raise web.HTTPError(verdict.status, verdict.message)
        return caller

    def write_json(self, payload: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps(payload))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        message = self._reason
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps({"status": status_code, "message": message}))

    def _wants_html(self) -> bool:
        return "text/html" in self.request.headers.get("Accept", "") and not (
            self.request.headers.get("Authorization")
        )

    def require_user(self) -> dict[str, Any]:
        """The caller's hub model; 401 (or a login redirect for browsers) or 403 otherwise."""
        model = self.hub_auth.get_user(self)
        if model is None:
            if self._wants_html() and self.request.method in ("GET", "HEAD"):
                self.redirect(self.get_login_url())
                raise web.Finish()
            raise web.HTTPError(401, "Log in first, or send 'Authorization: token <token>'.")
        try:
            allowed = self.check_hub_user(model)
        except UserNotAllowed:
            allowed = None
        if not allowed:
            raise web.HTTPError(
                403,
                "This token does not grant access to classhub; it needs the scope "
                "'access:services!service=classhub'.",
            )
        return allowed


class HealthHandler(APIHandler):
    """``GET /api/health``: liveness for load balancers and ``classhub local`` (no auth)."""

    def get(self) -> None:
        self.write_json({"status": "ok", "version": __version__})


class MeHandler(APIHandler):
    """``GET /api/me``: who the caller is, their hub groups and their classhub roles.

    Course roles come from the classhub store (a user in no course has none); the overall role
    is the highest of them, or ``admin`` for hub admins.
    """

    async def get(self) -> None:
        caller = self.require_user()
        if caller.get("kind", "user") != "user":
            self.write_json({"name": caller["name"], "kind": caller["kind"], "admin": False,
                             "groups": [], "role": None, "courses": {}})
            return
        user = await self.hub.user(caller["name"])
        in_courses = await self.courses.roles_of(user["name"])
        self.write_json(
            {
                "name": user["name"],
                "kind": "user",
                "admin": bool(user.get("admin")),
                "groups": sorted(user.get("groups", [])),
                "role": roles.overall_role(bool(user.get("admin")), in_courses),
                "courses": dict(sorted(in_courses.items())),
            }
        )


class ServerProfileHandler(APIHandler):
    """``PUT /api/users/<name>/server/profile``: restart the server with other options.

    Body: the new ``user_options`` (e.g. ``{"profile": "h200-mig-1g"}``). The home is kept; if the
    hub refuses the options, the server comes back with its old ones and the refusal is returned.
    """

    async def put(self, name: str) -> None:
        await self.authorize(authz.CONTROL_SERVER, user=name)
        try:
            options = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, 'The body must be JSON user_options, e.g. {"profile": "cpu"}') from None
        if not isinstance(options, dict):
            raise web.HTTPError(400, "The body must be a JSON object of user_options.")
        server = await servers.switch_profile(self.hub, name, options)
        self.write_json({"user_options": server.get("user_options"), "ready": server.get("ready"),
                         "url": server.get("url")})


class CoursesHandler(APIHandler):
    """``/api/courses``: GET lists the caller's courses (all for admins); POST creates one."""

    async def get(self) -> None:
        caller = await self.authorize(authz.LIST_COURSES)
        self.write_json(await self.courses.list(caller))

    async def post(self) -> None:
        caller = await self.authorize(authz.CREATE_COURSE)
        body = self.json_body()
        if not isinstance(body, dict) or not set(body) <= {"name", "display_name"}:
            raise web.HTTPError(400, 'The body must be {"name": "cs101", "display_name": "..."}.')
        problem = course_name_problem(body.get("name"))
        if problem:
            raise web.HTTPError(400, problem[0].upper() + problem[1:] + ".")
        display_name = body.get("display_name") or ""
        if not isinstance(display_name, str):
            raise web.HTTPError(400, "display_name must be a string.")
        self.write_json(await self.courses.create(caller.name, body["name"], display_name), 201)


class CourseHandler(APIHandler):
    """``/api/courses/<course>``: GET one course (members, admins); DELETE it (admins)."""

    async def get(self, course: str) -> None:
        await self.authorize(authz.READ_COURSE, course=course)
        self.write_json(await self.courses.get(course))

    async def delete(self, course: str) -> None:
        caller = await self.authorize(authz.DELETE_COURSE, course=course)
        await self.courses.delete(caller.name, course)
        self.set_status(204)
        self.finish()


class MembersHandler(APIHandler):
    """``/api/courses/<course>/members``: GET (staff), PUT add/remove (teachers, admins)."""

    async def get(self, course: str) -> None:
        await self.authorize(authz.READ_MEMBERS, course=course)
        self.write_json(await self.courses.members(course))

    async def put(self, course: str) -> None:
        caller = await self.authorize(authz.EDIT_MEMBERS, course=course)
        self.write_json(await self.courses.change_members(caller, course, self.json_body()))


class RosterHandler(APIHandler):
    """``POST /api/courses/<course>/roster``: import a CSV (raw body or multipart field "file").

    ``?remove_missing=true`` also removes students and TAs who are not in the file.
    """

    async def post(self, course: str) -> None:
        caller = await self.authorize(authz.IMPORT_ROSTER, course=course)
        files = self.request.files.get("file")
        if files:
            data = files[0]["body"]
        elif self.request.headers.get("Content-Type", "").startswith("multipart/form-data"):
            raise web.HTTPError(400, 'Send the CSV in the multipart field "file".')
        else:
            data = self.request.body
        if not data:
            raise web.HTTPError(400, "The roster is empty; send the CSV file as the body.")
        flag = self.get_query_argument("remove_missing", "false").lower()
        if flag not in ("true", "false", "1", "0", "yes", "no"):
            raise web.HTTPError(400, "remove_missing must be true or false.")
        remove = flag in ("true", "1", "yes")
        self.write_json(await self.courses.import_roster(caller.name, course, data, remove))


class CourseQuotaHandler(APIHandler):
    """``/api/courses/<course>/quota``: the course ceiling; members read it, admins set it."""

    async def get(self, course: str) -> None:
        await self.authorize(authz.READ_COURSE_QUOTA, course=course)
        self.write_json(await self.courses.course_quota(course))

    async def put(self, course: str) -> None:
        caller = await self.authorize(authz.SET_COURSE_QUOTA, course=course)
        self.write_json(await self.courses.set_course_quota(caller.name, course, self.json_body()))


class UserQuotaHandler(APIHandler):
    """``/api/courses/<course>/quota/users/<user>``: one member's limits, within the ceiling."""

    async def get(self, course: str, user: str) -> None:
        await self.authorize(authz.READ_USER_QUOTA, course=course, user=user)
        self.write_json(await self.courses.user_quota(course, user))

    async def put(self, course: str, user: str) -> None:
        caller = await self.authorize(authz.SET_USER_QUOTA, course=course, user=user)
        self.write_json(await self.courses.set_user_quota(caller.name, course, user, self.json_body()))


class MyUsageHandler(APIHandler):
    """``GET /api/usage/me``: what the caller holds, with their limits in each course."""

    async def get(self) -> None:
        caller = await self.authorize(authz.READ_OWN_USAGE)
        self.write_json(await self.courses.my_usage(caller.name))


class CourseUsageHandler(APIHandler):
    """``GET /api/courses/<course>/usage``: the course and each user of it (teachers, TAs)."""

    async def get(self, course: str) -> None:
        await self.authorize(authz.READ_COURSE_USAGE, course=course)
        self.write_json(await self.courses.course_usage(course))


class AllUsageHandler(APIHandler):
    """``GET /api/usage``: every course and user (admins)."""

    async def get(self) -> None:
        await self.authorize(authz.READ_ALL_USAGE)
        self.write_json(await self.courses.all_usage())


class OpenAPIHandler(APIHandler):
    """``GET /api/openapi.json``: the API description, without login (it holds no data)."""

    def get(self) -> None:
        self.write_json(openapi.document())


class MetricsHandler(APIHandler):
    """``GET /metrics``: Prometheus text format.

    Protected like JupyterHub's own /hub/metrics: by default a hub admin or a token with the
    scope ``read:metrics`` (e.g. a Prometheus hub service with that role); anonymous scrapes only
    when the service runs with ``authenticate_metrics = False`` ($CLASSHUB_METRICS_AUTH=0).
    """

    async def get(self) -> None:
        if self.settings.get("authenticate_metrics", True):
            model = self.hub_auth.get_user(self)
            if model is None:
                raise web.HTTPError(
                    401, "Send 'Authorization: token <token>' with a token that has the scope "
                    "'read:metrics'."
                )
            try:
                access = bool(self.check_hub_user(model))
            except UserNotAllowed:
                access = False
            caller = await self.courses.caller(model, access=access)
            verdict = authz.decide(caller, authz.READ_METRICS)
            if not verdict:
                raise web.HTTPError(verdict.status, verdict.message)
        body = await asyncio.to_thread(metrics.render, self.settings["metrics_registry"])
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(body)


class NotFoundHandler(APIHandler):
    """Unknown API paths answer JSON 404 rather than an HTML page."""

    def prepare(self) -> None:
        raise web.HTTPError(404, f"No such classhub API endpoint: {self.request.path}")
