"""REST handlers of the classhub service. Thin: identify the caller, ask core, answer JSON.

Every handler that acts on something first asks hub_ext.core.authz whether the caller may (a pure
decision), then calls one method of hub_ext.service.courses, which owns the store transactions
and the hub group sync.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from typing import Any

from jupyterhub.services.auth import HubOAuthenticated, UserNotAllowed
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import DataError
from tornado import httputil, web
from tornado.escape import utf8
from tornado.ioloop import IOLoop

from hub_ext import __version__
from hub_ext.core import authz, bodies, roles
from hub_ext.hubapi import HubAPI, HubAPIError
from hub_ext.service import body_models, metrics, servers
from hub_ext.service.courses import Courses, course_name_problem
from hub_ext.service.declare import needs

#: The hub's answers passed on to the caller as they are rather than as a 502: the user, group or
#: server named does not exist (404), the hub refused the input (400), or it conflicts (409).
HUB_PASSED = (400, 404, 409)
#: The largest request body an endpoint reads unless its handler says otherwise (bytes).
MAX_BODY_BYTES = 1024 * 1024
#: A refused or too large body up to this size is still read to its end (and dropped) before the
#: answer: a connection closed with unread data is reset, and the hub's proxy then answers 502/503
#: instead of passing the refusal on. A larger body gets the answer at once.
DRAIN_BYTES = 64 * 1024 * 1024
#: How long, at most, an answer given before its request's body was read waits for the client to
#: close the connection (the answer says ``Connection: close``) while the rest of the body is read
#: and dropped: a socket closed with unread data is reset, and the hub's proxy, still sending the
#: body, then answers 503 instead of passing the answer on (see `APIHandler.finish`).
LINGER_SECONDS = 5.0
_UNSET = object()
_BODY_TYPES = ("application/json", "application/x-www-form-urlencoded", "multipart/form-data")

#: Sent with every classhub response (API answers, pages, errors, 404s, static files, the OAuth
#: callback): no page may be framed by another one (clickjacking: a framed classhub page that a
#: click turns into an action), like the hub's own pages (JupyterHub's default
#: ``frame-ancestors 'none'``; X-Frame-Options for browsers without CSP), and no answer is sniffed
#: as another type than its Content-Type says.
SECURITY_HEADERS = {
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
}


class SecurityHeaders:
    """Mixin (before the tornado handler class in the bases) for every handler of the service:
    `SECURITY_HEADERS` on each response.

    tornado sets the default headers when a handler is made and again in ``clear()`` before an
    error is written, so error answers carry them too."""

    def set_default_headers(self) -> None:
        super().set_default_headers()
        for name, value in SECURITY_HEADERS.items():
            self.set_header(name, value)


def _after_body(method):
    """Run a handler method only once its body is complete and passed the checks of
    `APIHandler.body_complete` (too large: 413, malformed JSON: 400, a refusal kept: raised)."""

    @functools.wraps(method)
    async def run(self: APIHandler, *args: Any, **kwargs: Any) -> None:
        self._body_read = True  # tornado calls a method only once it has read the whole body
        self.body_complete()
        await self.identify()
        result = method(self, *args, **kwargs)
        if inspect.isawaitable(result):
            await result

    return run


@web.stream_request_body
class APIHandler(SecurityHeaders, HubOAuthenticated, web.RequestHandler):
    """Base for API handlers: JSON errors, 401/403 instead of redirects for API clients, and one
    guard for every request body.

    The body is streamed (tornado's ``stream_request_body``) so that a body over
    ``max_body_bytes`` gets a JSON 413 instead of a reset connection, and a refusal decided before
    the body (see `refuse_after_body`) is answered after the body was read and dropped. Every
    HTTP method a subclass defines runs after `body_complete`: a JSON body (Content-Type
    application/json) that is not valid UTF-8, nests too deeply, or holds numbers no column can
    store gets a 400 before the handler sees it.
    """

    #: The largest body this endpoint takes; larger ones are answered 413.
    max_body_bytes = MAX_BODY_BYTES
    _body_limit = MAX_BODY_BYTES
    _body_buffer: bytearray | None = None
    _body_received = 0
    _body_too_large = False
    _body_done = False
    _refusal: web.HTTPError | None = None
    _parsed_body: Any = _UNSET
    #: Whether tornado has read the whole request body (set when the HTTP method starts).
    _body_read = False
    _lingered = False
    _linger: Any = None  # the timeout that ends lingering (`finish`)
    _linger_flush: asyncio.Future[None] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("get", "post", "put", "patch", "delete"):
            if name in cls.__dict__:
                setattr(cls, name, _after_body(cls.__dict__[name]))

    @property
    def hub(self) -> HubAPI:
        return self.settings["hub_api"]

    @property
    def courses(self) -> Courses:
        return self.settings["courses"]

    # -- the request body ---------------------------------------------------------------------
    def prepare(self) -> Any:
        self.start_body(self.max_body_bytes)

    def start_body(self, limit: int) -> None:
        """Get ready for a body of at most ``limit`` bytes (called from ``prepare``)."""
        self._body_limit = limit
        self._body_buffer = bytearray()
        declared = self.request.headers.get("Content-Length", "")
        size = int(declared) if declared.isdigit() else 0
        if size > max(limit, DRAIN_BYTES):  # too much to drain: answer now, the connection closes
            raise web.HTTPError(413, self._too_large_message())
        self._body_too_large = size > limit
        self.request.connection.set_max_body_size(max(limit, DRAIN_BYTES))

    def refuse_after_body(self, error: web.HTTPError) -> None:
        """Answer ``error`` once the body has been read and dropped (from ``prepare``): the
        body is never kept, and the proxy sees a complete exchange rather than a reset."""
        self._refusal = error
        declared = self.request.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > DRAIN_BYTES:
            raise error
        self._body_buffer = None
        self.request.connection.set_max_body_size(DRAIN_BYTES)

    def accept_chunk(self, chunk: bytes) -> bool:
        """Count a chunk of the body; False when it is to be dropped (refused, over the limit, or
        read after the answer)."""
        if self._refusal is not None or self._body_too_large or self._lingered:
            return False
        self._body_received += len(chunk)
        if self._body_received > self._body_limit:
            self._body_too_large = True
            self._body_buffer = None
            return False
        return True

    def data_received(self, chunk: bytes) -> None:
        if self.accept_chunk(chunk) and self._body_buffer is not None:
            self._body_buffer.extend(chunk)

    def _too_large_message(self) -> str:
        return (f"The body is larger than {self._body_limit} bytes, the most this endpoint "
                "takes; send less.")

    def body_complete(self) -> None:
        """The whole body has arrived: raise a kept refusal or a 413, else make it
        ``request.body`` (form fields and files parsed, as tornado does) and check a JSON body."""
        if self._body_done:
            return
        self._body_done = True
        if self._refusal is not None:
            raise self._refusal
        if self._body_too_large:
            raise web.HTTPError(413, self._too_large_message())
        if self._body_buffer is not None:
            self.request.body = bytes(self._body_buffer)
            self._body_buffer = None
        content_type = self.request.headers.get("Content-Type", "")
        kind = content_type.split(";")[0].strip().lower()
        if not self.request.body or kind not in _BODY_TYPES:
            return
        if kind == "application/json":
            self._parsed_body = self._parse_json(self.request.body)
            return
        try:
            httputil.parse_body_arguments(content_type, self.request.body, self.request.body_arguments,
                                          self.request.files, self.request.headers)
        except httputil.HTTPInputError as e:
            raise web.HTTPError(400, "The form body cannot be read: %s.", str(e)) from None
        for key, values in self.request.body_arguments.items():
            self.request.arguments.setdefault(key, []).extend(values)

    @staticmethod
    def _parse_json(raw: bytes) -> Any:
        try:
            return bodies.parse_json(raw)
        except bodies.BodyError as e:
            raise web.HTTPError(400, str(e)) from None

    def json_body(self) -> Any:
        """The JSON request body (``null`` when empty); 400 with a sentence when it is not JSON,
        not UTF-8, nested too deeply, or holds a number outside the 64-bit range or not finite."""
        self.body_complete()
        if self._parsed_body is _UNSET:
            self._parsed_body = self._parse_json(self.request.body or b"null")
        return self._parsed_body

    def body_as(self, model: type[body_models.B]) -> body_models.B:
        """The JSON body as the pydantic ``model``; 400 with the sentence of the first wrong
        field (hub_ext.service.body_models)."""
        try:
            return body_models.parse(model, self.json_body())
        except body_models.BodyError as e:
            raise web.HTTPError(400, str(e)) from None

    def decode_argument(self, value: bytes, name: str | None = None) -> str:
        """Path and query values; a NUL in one names nothing (404 in a path, 400 in a query)."""
        text = super().decode_argument(value, name)
        if "\x00" in text:
            if name is None:
                raise web.HTTPError(404, "No such classhub resource.")
            raise web.HTTPError(400, "%s must not contain NUL characters.", name)
        return text

    async def authorize(self, action: str, **about: str) -> authz.Caller:
        """Who asks (401/403 when nobody, or a token without access) and whether they may do
        `action`; 403 with authz's sentence otherwise."""
        caller = await self.courses.caller(self.require_user())
        verdict = authz.decide(caller, action, **about)
        if not verdict:
            raise web.HTTPError(verdict.status, verdict.message)
        return caller

    def flush(self, include_footers: bool = False) -> asyncio.Future[None]:
        """Send what is written so far; an answer given before the request body was read says
        ``Connection: close``, and a 405 says which methods the endpoint has (``Allow``).

        Why: an answer finished before tornado read the request's body (an error raised before or
        in ``prepare``: 405 for a method tornado does not know, 404 for a NUL in the path, 413 for
        a body too large to drain) makes tornado's HTTP1Connection.finish close the connection
        after it, without saying so unless it meant to close anyway. The hub's proxy keeps its
        connections to the service alive and sent the next request, someone else's, down the
        closed one: a 503 for them. Told ``Connection: close``, it opens a new one."""
        if not self._body_read:
            self.set_header("Connection", "close")
        if self.get_status() == 405:
            self.set_header("Allow", ", ".join(self.allowed_methods()))
        return super().flush(include_footers)

    def finish(self, chunk: str | bytes | dict[str, Any] | None = None) -> asyncio.Future[None]:
        """Finish the answer; an error answered before the request's body was read, while the body
        is still coming, is sent whole at once and the connection closed only after the client
        closed it or `LINGER_SECONDS`, the rest of the body read and dropped meanwhile.

        Why: tornado closes the connection after such an answer (see `flush`); closed while the
        proxy still sends the body, the connection is reset, and the proxy answered 503 instead of
        passing on e.g. the 413 for a body too large to drain. (The answer is the ``chunk`` given
        here: ``send_error`` cleared the buffer, and `write_error` answers with ``finish``.)"""
        if self._linger is not None:  # send_error's own finish() after write_error's
            return self._linger_flush
        if (self._lingered or self._body_read or not isinstance(chunk, (str, bytes))
                or not self._body_in_flight()):
            return super().finish(chunk)
        self._lingered = True  # from now on every chunk of the body is dropped
        data = utf8(chunk)
        self.set_header("Content-Length", len(data))
        self.write(data)
        self._linger_flush = self.flush()  # the whole answer, with Connection: close
        # tornado answers a body over its limit with a bare 400, which must not follow this one
        self.request.connection.set_max_body_size(2**62)
        self._linger = IOLoop.current().call_later(LINGER_SECONDS, self._end_linger)
        return self._linger_flush

    def _body_in_flight(self) -> bool:
        headers = self.request.headers
        declared = headers.get("Content-Length", "")
        return (declared.isdigit() and int(declared) > 0) or (
            "chunked" in headers.get("Transfer-Encoding", "").lower())

    def _end_linger(self) -> None:
        if self._linger is None:
            return
        IOLoop.current().remove_timeout(self._linger)
        self._linger = None
        self.finish()

    def on_connection_close(self) -> None:
        super().on_connection_close()
        self._end_linger()

    @classmethod
    def allowed_methods(cls) -> list[str]:
        """The HTTP methods this endpoint answers (those its class defines)."""
        return [m for m in cls.SUPPORTED_METHODS
                if getattr(cls, m.lower(), None) is not getattr(web.RequestHandler, m.lower(), None)]

    def write_json(self, payload: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps(payload))

    def send_error(self, status_code: int = 500, **kwargs: Any) -> None:
        """A refusal of the hub that the caller can act on is theirs, not a 502 (`HUB_PASSED`)."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, HubAPIError) and exc.status in HUB_PASSED:
            status_code = exc.status
        elif isinstance(exc, DataError):  # e.g. a name longer than its PostgreSQL column
            kwargs["exc_info"] = (web.HTTPError, web.HTTPError(
                400, "A value is too long or out of range for where classhub keeps it; shorten "
                "it (names and notes: at most 255 characters). Nothing was changed."), None)
            status_code = 400
        super().send_error(status_code, **kwargs)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Every error is JSON ``{"status", "message"}``; an unexpected exception is a 500 whose
        message says nothing about the code (the service log has the traceback)."""
        message = self._reason
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, HubAPIError) and exc.status == status_code:
            message = exc.hub_message or (f"The hub answered {status_code}: "
                                          + ("no such user, group or server." if status_code == 404
                                             else "it refused the request."))
        elif isinstance(exc, web.HTTPError) and exc.log_message:
            try:
                message = exc.log_message % exc.args if exc.args else exc.log_message
            except (TypeError, ValueError):
                message = exc.log_message
        elif status_code >= 500:
            message = "classhub failed to answer this request; the service log has the details."
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps({"status": status_code, "message": message}))

    def _wants_html(self) -> bool:
        return "text/html" in self.request.headers.get("Accept", "") and not (
            self.request.headers.get("Authorization")
        )

    _identified = False
    _hub_model: dict[str, Any] | None = None

    async def identify(self) -> dict[str, Any] | None:
        """Ask the hub who sends this request, without blocking the event loop (HubOAuth's
        synchronous lookup would wait for the hub's answer on the loop); once per request."""
        if not self._identified and "hub_auth" in self.settings:
            self._hub_model = await self.hub_auth.get_user(self, sync=False)
            self._identified = True
        return self._hub_model

    def get_current_user(self) -> dict[str, Any] | None:
        if self._identified:
            return self._hub_model
        return super().get_current_user()

    def require_user(self) -> dict[str, Any]:
        """The caller's hub model; 401 (or a login redirect for browsers) or 403 otherwise."""
        model = self.get_current_user()
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
        user = await self.hub.recent_user(caller["name"])
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
        options = self.json_body() if self.request.body else {}
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

    @needs(authz.READ_COURSE, course="course")
    async def get(self, course: str) -> None:
        self.write_json(await self.courses.get(course))

    @needs(authz.DELETE_COURSE, course="course")
    async def delete(self, course: str) -> None:
        await self.courses.delete(self.caller.name, course)
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

    max_body_bytes = 8 * 1024 * 1024  # a CSV of tens of thousands of students

    async def post(self, course: str) -> None:
        caller = await self.authorize(authz.IMPORT_ROSTER, course=course)
        if self.request.headers.get("Content-Type", "").split(";")[0].strip().lower() == "application/json":
            raise web.HTTPError(400, "A roster is a CSV file (username,role); send it as the body "
                                "(Content-Type text/csv) or in the multipart field \"file\", not JSON.")
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
        self.write_json(await self.courses.import_roster(caller, course, data, remove))


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


class MetricsHandler(APIHandler):
    """``GET /metrics``: Prometheus text format.

    Protected like JupyterHub's own /hub/metrics: by default a hub admin or a token with the
    scope ``read:metrics`` (e.g. a Prometheus hub service with that role); anonymous scrapes only
    when the service runs with ``authenticate_metrics = False`` ($CLASSHUB_METRICS_AUTH=0).
    """

    async def get(self) -> None:
        if self.settings.get("authenticate_metrics", True):
            model = self.get_current_user()
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
        self.refuse_after_body(web.HTTPError(404, "No such classhub API endpoint: %s", self.request.path))

    async def get(self) -> None:
        """Never runs: the 404 kept by `prepare` is raised once the body was read."""

    post = put = patch = delete = get
