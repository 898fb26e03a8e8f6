"""REST handlers of the classhub service. Thin: identify the caller, ask core, answer JSON.

Every handler method declares the action it performs (``@needs``, hub_ext.service.declare), which
hub_ext.core.authz decides before the method runs (a pure decision), and the model of its JSON
body (``@takes``, hub_ext.service.body_models); then it calls one method of
hub_ext.service.courses, which owns the store transactions and the hub group sync.
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
from tornado.log import gen_log

from hub_ext import __version__
from hub_ext.core import authz, bodies, roles
from hub_ext.hubapi import HubAPI, HubAPIError
from hub_ext.service import arguments, body_models, metrics, servers
from hub_ext.service.courses import Courses
from hub_ext.service.declare import PUBLIC, needs, takes

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

#: What a handler method may raise for "what you sent cannot be used", answered 400 with its
#: sentence (`APIHandler.send_error`): a body that does not fit its model or a meaning check
#: (hub_ext.service.body_models.BodyError), JSON that cannot be read (hub_ext.core.bodies), and a
#: value too long for its column (the database's DataError).
BAD_REQUEST = (body_models.BodyError, bodies.BodyError, DataError)
#: The sentence for a value too long or out of range for where classhub keeps it.
TOO_LONG = ("A value is too long or out of range for where classhub keeps it; shorten it (names and "
            "notes: at most 255 characters). Nothing was changed.")

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


class ServiceHubAuth(HubOAuthenticated):
    """Handlers that ask the hub who calls use the service's own HubOAuth (``ClasshubService.
    make_app``: a 60 s token cache, so a revoked token stops working within a minute), not
    HubAuth's process-wide default instance (300 s)."""

    @property
    def hub_auth(self) -> Any:
        return self.settings.get("hub_auth") or HubOAuthenticated.hub_auth.fget(self)

    @hub_auth.setter
    def hub_auth(self, auth: Any) -> None:
        self._hub_auth = auth


@web.stream_request_body
class APIHandler(SecurityHeaders, ServiceHubAuth, web.RequestHandler):
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

    def set_default_headers(self) -> None:
        """Every answer (errors too) is the caller's alone: no cache, shared or the browser's,
        may keep one (a course's grades, a job's log, a roster) for the next person at that
        computer or behind that proxy; the pages are APIHandlers too (render.py)."""
        super().set_default_headers()
        self.set_header("Cache-Control", "no-store")

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
            raise body_models.BodyError(f"The form body cannot be read: {e}.") from None
        for key, values in self.request.body_arguments.items():
            self.request.arguments.setdefault(key, []).extend(values)

    @staticmethod
    def _parse_json(raw: bytes) -> Any:
        return bodies.parse_json(raw)  # a BodyError is a 400 (`BAD_REQUEST`)

    def json_body(self) -> Any:
        """The JSON request body (``null`` when empty); 400 with a sentence when it is not JSON,
        not UTF-8, nested too deeply, or holds a number outside the 64-bit range or not finite."""
        self.body_complete()
        if self._parsed_body is _UNSET:
            self._parsed_body = self._parse_json(self.request.body or b"null")
        return self._parsed_body

    def body_as(self, model: type[body_models.B]) -> body_models.B:
        """The JSON body as the pydantic ``model`` (what ``@takes`` puts in ``self.body``); a
        400 with the sentence of the first wrong field (hub_ext.service.body_models)."""
        self.body_complete()
        data = {} if model.empty_is_object and not self.request.body else self.json_body()
        return body_models.parse(model, data, self.body_context())

    def body_context(self) -> dict[str, Any]:
        """What the body models' validators need from the running service: the hub's username
        normalizer (``normalize``), so a body names members as the hub will."""
        courses = self.settings.get("courses")
        return {"normalize": courses.normalize} if courses is not None else {}

    def decode_argument(self, value: bytes, name: str | None = None) -> str:
        """Path and query values; a NUL in one names nothing (404 in a path, 400 in a query)."""
        text = super().decode_argument(value, name)
        if "\x00" in text:
            if name is None:
                raise web.HTTPError(404, "No such classhub resource.")
            arguments.refuse(name, f"{name} must not contain NUL characters.")
        return text

    async def authorize(self, action: str, **about: Any) -> authz.Caller:
        """Who asks and whether they may do `action` (called by ``@needs``): the answer of
        hub_ext.core.authz.decide, as its status and sentence when it refuses.

        Nobody (no token, no login) is `authz.ANONYMOUS` (browsers asking for a page are sent to
        log in first); a token without access to classhub is refused here, unless the action is
        one such a token may do (`authz.WITHOUT_ACCESS`: the metrics). The hub is asked without
        blocking the loop (`identify`), also when a handler authorizes in ``prepare``."""
        model = await self.identify() if "hub_auth" in self.settings else None
        if model is None:
            if self._wants_html() and self.request.method in ("GET", "HEAD"):
                self.redirect(self.get_login_url())
                raise web.Finish()
            caller = authz.ANONYMOUS
        else:
            access = self._has_access(model)
            if not access and action not in authz.WITHOUT_ACCESS:
                self.require_user()  # the 403 that says which scope is missing
            caller = await self.make_caller(model, access)
        verdict = authz.decide(caller, action, **about)
        if not verdict:
            raise web.HTTPError(verdict.status, verdict.message)
        return caller

    async def make_caller(self, model: dict[str, Any], access: bool) -> authz.Caller:
        """The authz Caller for the hub's model of whoever asks; handlers whose rules need more
        facts (hub groups, a server's own token) add them here."""
        return await self.courses.caller(model, access=access)

    def _has_access(self, model: dict[str, Any]) -> bool:
        try:
            return bool(self.check_hub_user(model))
        except UserNotAllowed:
            return False

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
        elif isinstance(exc, BAD_REQUEST):
            # The one place a "what you sent cannot be used" becomes a 400 (hand-written 400s
            # elsewhere: arguments.refuse for query arguments only; docs/architecture.md).
            sentence = TOO_LONG if isinstance(exc, DataError) else str(exc)
            kwargs["exc_info"] = (web.HTTPError, web.HTTPError(400, "%s", sentence), None)
            status_code = 400
        super().send_error(status_code, **kwargs)

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """A refused body is the caller's mistake: one warning line, not an error's traceback."""
        if isinstance(value, BAD_REQUEST):
            gen_log.warning("400 %s: %s", self._request_summary(), value)
            return
        super().log_exception(typ, value, tb)

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
        model = self.get_current_user() if "hub_auth" in self.settings else None
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

    @needs(PUBLIC)
    def get(self) -> None:
        self.write_json({"status": "ok", "version": __version__})


class MeHandler(APIHandler):
    """``GET /api/me``: who the caller is, their hub groups and their classhub roles.

    Course roles come from the classhub store (a user in no course has none); the overall role
    is the highest of them, or ``admin`` for hub admins.
    """

    @needs(authz.READ_ME)
    async def get(self) -> None:
        if not self.caller.is_user:
            self.write_json({"name": self.caller.name, "kind": self.caller.kind, "admin": False,
                             "groups": [], "role": None, "courses": {}})
            return
        user = await self.hub.recent_user(self.caller.name)
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

    @needs(authz.CONTROL_SERVER, user="name")
    @takes(body_models.ProfileOptionsBody)
    async def put(self, name: str) -> None:
        server = await servers.switch_profile(self.hub, name, self.body.user_options())
        self.write_json({"user_options": server.get("user_options"), "ready": server.get("ready"),
                         "url": server.get("url")})


class CoursesHandler(APIHandler):
    """``/api/courses``: GET lists the caller's courses (all for admins); POST creates one."""

    @needs(authz.LIST_COURSES)
    async def get(self) -> None:
        self.write_json(await self.courses.list(self.caller))

    @needs(authz.CREATE_COURSE)
    @takes(body_models.NewCourseBody)
    async def post(self) -> None:
        self.write_json(await self.courses.create(self.caller.name, self.body.name,
                                                  self.body.display_name), 201)


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

    @needs(authz.READ_MEMBERS, course="course")
    async def get(self, course: str) -> None:
        self.write_json(await self.courses.members(course))

    @needs(authz.EDIT_MEMBERS, course="course")
    @takes(body_models.MemberChangeBody)
    async def put(self, course: str) -> None:
        self.write_json(await self.courses.change_members(self.caller, course, self.body.add,
                                                          list(self.body.remove)))


def roster_upload(handler: APIHandler, empty: str) -> bytes:
    """The roster CSV of a request: the raw body, or the multipart field "file".

    A roster is no JSON body, so no body model reads it; what is wrong with the upload is a
    BodyError like a wrong JSON body (``empty``: the sentence for an empty one)."""
    kind = handler.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        raise body_models.BodyError(
            "A roster is a CSV file (username,role); send it as the body (Content-Type text/csv) "
            "or in the multipart field \"file\", not JSON.")
    files = handler.request.files.get("file")
    if files:
        data = files[0]["body"]
    elif kind == "multipart/form-data":
        raise body_models.BodyError('Send the CSV in the multipart field "file".')
    else:
        data = handler.request.body
    if not data:
        raise body_models.BodyError(empty)
    return data


class RosterHandler(APIHandler):
    """``POST /api/courses/<course>/roster``: import a CSV (raw body or multipart field "file").

    ``?remove_missing=true`` also removes students and TAs who are not in the file.
    """

    max_body_bytes = 8 * 1024 * 1024  # a CSV of tens of thousands of students

    @needs(authz.IMPORT_ROSTER, course="course")
    async def post(self, course: str) -> None:
        data = roster_upload(self, "The roster is empty; send the CSV file as the body.")
        remove = arguments.flag_argument(self, "remove_missing")
        self.write_json(await self.courses.import_roster(self.caller, course, data, remove))


class CourseQuotaHandler(APIHandler):
    """``/api/courses/<course>/quota``: the course ceiling; members read it, admins set it."""

    @needs(authz.READ_COURSE_QUOTA, course="course")
    async def get(self, course: str) -> None:
        self.write_json(await self.courses.course_quota(course))

    @needs(authz.SET_COURSE_QUOTA, course="course")
    @takes(body_models.QuotaBody)
    async def put(self, course: str) -> None:
        self.write_json(await self.courses.set_course_quota(self.caller.name, course, self.body.limits))


class UserQuotaHandler(APIHandler):
    """``/api/courses/<course>/quota/users/<user>``: one member's limits, within the ceiling."""

    @needs(authz.READ_USER_QUOTA, course="course", user="user")
    async def get(self, course: str, user: str) -> None:
        self.write_json(await self.courses.user_quota(course, user))

    @needs(authz.SET_USER_QUOTA, course="course", user="user")
    @takes(body_models.QuotaBody)
    async def put(self, course: str, user: str) -> None:
        self.write_json(await self.courses.set_user_quota(self.caller.name, course, user,
                                                          self.body.limits))


class MyUsageHandler(APIHandler):
    """``GET /api/usage/me``: what the caller holds, with their limits in each course."""

    @needs(authz.READ_OWN_USAGE)
    async def get(self) -> None:
        self.write_json(await self.courses.my_usage(self.caller.name))


class CourseUsageHandler(APIHandler):
    """``GET /api/courses/<course>/usage``: the course and each user of it (teachers, TAs)."""

    @needs(authz.READ_COURSE_USAGE, course="course")
    async def get(self, course: str) -> None:
        self.write_json(await self.courses.course_usage(course))


class AllUsageHandler(APIHandler):
    """``GET /api/usage``: every course and user (admins)."""

    @needs(authz.READ_ALL_USAGE)
    async def get(self) -> None:
        self.write_json(await self.courses.all_usage())


def _metrics_open(handler: APIHandler, arguments: dict[str, Any]) -> bool:
    """Whether the deployment opened the metrics to anonymous scrapes: the documented setting
    ``ClasshubService.authenticate_metrics = False`` (docs/admins/monitoring.md), which authz.READ_METRICS
    reads."""
    return not handler.settings.get("authenticate_metrics", True)


class MetricsHandler(APIHandler):
    """``GET /metrics``: Prometheus text format.

    Protected like JupyterHub's own /hub/metrics: by default a hub admin or a token with the
    scope ``read:metrics`` (e.g. a Prometheus hub service with that role), even one without
    access to the rest of classhub; anonymous scrapes only when the service runs with
    ``authenticate_metrics = False`` ($CLASSHUB_METRICS_AUTH=0).
    """

    @needs(authz.READ_METRICS, open=_metrics_open)
    async def get(self) -> None:
        body = await asyncio.to_thread(metrics.render, self.settings["metrics_registry"])
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(body)


class NotFoundHandler(APIHandler):
    """Unknown API paths answer JSON 404 rather than an HTML page."""

    def prepare(self) -> None:
        self.refuse_after_body(web.HTTPError(404, "No such classhub API endpoint: %s", self.request.path))

    @needs(PUBLIC)
    async def get(self) -> None:
        """Never runs: the 404 kept by `prepare` is raised once the body was read."""

    post = put = patch = delete = get
