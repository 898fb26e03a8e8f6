"""The classhub service's culling API: what the culler decides from, read and changed.

`ROUTES` (relative to the service prefix) are mounted by hub_ext.service.app; `OPENAPI_PATHS` are
merged into the OpenAPI document by hub_ext.service.openapi.document().

- ``GET /api/culling/me``: the caller's pending cull warnings (the JupyterLab extension polls it);
- ``/api/culling/persistent``: servers an admin marked persistent (GET lists, PUT marks/unmarks);
- ``/api/culling/courses/<course>/policy``: a course's own timeouts per profile kind;
- ``/api/culling/courses/<course>/windows``: no-cull windows (e.g. an exam).

The decisions themselves are made by the culler service (culler/); this module only reads and
writes what it decides from (hub_ext.store.culler_models), through `CullingSettings`. The
culler's metrics are in hub_ext.service.metrics, its warning on hub pages in hub_ext.hubside.
"""

from __future__ import annotations

import asyncio
import math
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from tornado import web

from hub_ext import store
from hub_ext.core import bodies
from hub_ext.service import handlers
from hub_ext.service.apidoc import json_body, ok, op
from hub_ext.store import culler_models as cm


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _warning_json(w: cm.CullWarning, now: datetime) -> dict[str, Any]:
    return {
        "user": w.username,
        "server_name": w.server_name,
        "warned_at": w.warned_at.isoformat(),
        "cull_at": w.cull_at.isoformat(),
        "seconds_left": max(0, round((w.cull_at - now).total_seconds())),
        "message": w.message,
    }


def _window_json(w: cm.NoCullWindow) -> dict[str, Any]:
    return {"id": w.id, "course": w.course, "start": w.starts_at.isoformat(),
            "end": w.ends_at.isoformat(), "note": w.note, "created_by": w.created_by}


def _policy_json(row: cm.CullPolicyRow) -> dict[str, Any]:
    return {"kind": row.kind, **{f: getattr(row, f) for f in cm.POLICY_FIELDS}}


class CullingSettings:
    """What the culler decides from, as the API reads and changes it: persistent servers, course
    policies, no-cull windows, the caller's warnings. Owns the transactions; every database call
    runs in a worker thread, reads through the store's readers (docs/architecture.md, rule 7)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self.reads = store.readers(sessions)

    @staticmethod
    async def _db(fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    # -- warnings --------------------------------------------------------------------------------
    async def of_user(self, user: str) -> dict[str, Any]:
        return await self._db(self._of_user, user, _now())

    def _of_user(self, user: str, now: datetime) -> dict[str, Any]:
        with self.reads() as session:
            warnings = [_warning_json(w, now) for w in cm.warnings_of(session, user)]
            persistent = sorted(s for u, s in cm.persistent_keys(session) if u == user)
        return {"user": user, "warnings": warnings, "persistent": persistent}

    # -- persistent servers ----------------------------------------------------------------------
    async def persistent(self) -> list[dict[str, Any]]:
        return await self._db(self._persistent)

    def _persistent(self) -> list[dict[str, Any]]:
        with self.reads() as session:
            rows = session.scalars(select(cm.PersistentServer).order_by(
                cm.PersistentServer.username, cm.PersistentServer.server_name)).all()
            return [{"user": r.username, "server_name": r.server_name, "marked_by": r.marked_by,
                     "marked_at": r.marked_at.isoformat(), "note": r.note} for r in rows]

    async def set_persistent(self, actor: str, user: str, name: str, persistent: bool, note: str) -> None:
        await self._db(self._set_persistent, actor, user, name, persistent, note)

    def _set_persistent(self, actor: str, user: str, name: str, persistent: bool, note: str) -> None:
        now = _now()
        with self.sessions.begin() as session:
            cm.set_persistent(session, user, name, persistent, actor, now, note)
            store.record(session, actor, "server_persistent" if persistent else "server_not_persistent",
                         now, user=user, server=name, note=note)

    # -- course policies -------------------------------------------------------------------------
    async def policies(self, course: str) -> dict[str, Any]:
        return {"course": course, "policies": await self._db(self._policies, course)}

    def _policies(self, course: str) -> list[dict[str, Any]]:
        with self.reads() as session:
            return [_policy_json(r) for r in cm.course_policies(session) if r.course == course]

    async def set_policy(self, actor: str, course: str, kind: str, fields: dict[str, Any] | None
                         ) -> dict[str, Any]:
        await self._db(self._set_policy, actor, course, kind, fields)
        return await self.policies(course)

    def _set_policy(self, actor: str, course: str, kind: str, fields: dict[str, Any] | None) -> None:
        with self.sessions.begin() as session:
            cm.set_course_policy(session, course, kind, fields)
            store.record(session, actor, "culling_policy_set", _now(), course=course, kind=kind,
                         policy=fields)

    # -- no-cull windows -------------------------------------------------------------------------
    async def windows(self, course: str) -> dict[str, Any]:
        return {"course": course, "windows": await self._db(self._windows, course)}

    def _windows(self, course: str) -> list[dict[str, Any]]:
        with self.reads() as session:
            return [_window_json(w) for w in cm.windows(session, _now(), course)]

    async def add_window(self, actor: str, course: str, start: datetime, end: datetime,
                         note: str) -> dict[str, Any]:
        return await self._db(self._add_window, actor, course, start, end, note)

    def _add_window(self, actor: str, course: str, start: datetime, end: datetime,
                    note: str) -> dict[str, Any]:
        with self.sessions.begin() as session:
            window = cm.NoCullWindow(course=course, starts_at=start, ends_at=end, note=note,
                                     created_by=actor)
            session.add(window)
            store.record(session, actor, "no_cull_window_added", _now(), course=course,
                         start=start.isoformat(), end=end.isoformat(), note=note)
            session.flush()
            return _window_json(window)

    async def remove_window(self, actor: str, course: str, window_id: int) -> None:
        await self._db(self._remove_window, actor, course, window_id)

    def _remove_window(self, actor: str, course: str, window_id: int) -> None:
        with self.sessions.begin() as session:
            # an id the column cannot hold names no window: the same 404 as a missing one
            row = session.get(cm.NoCullWindow, window_id) if 1 <= window_id <= bodies.DB_INT_MAX else None
            if row is None or row.course != course:
                raise web.HTTPError(404, f"No window {window_id} in course {course}; GET "
                                    f"/api/culling/courses/{course}/windows lists them.")
            session.delete(row)
            store.record(session, actor, "no_cull_window_removed", _now(), course=course,
                         window=window_id)


class CullingHandler(handlers.APIHandler):
    """Base: the caller as an authz Caller, and sentences for refusals."""

    @property
    def culling(self) -> CullingSettings:
        return self.settings["culling"]

    async def caller(self):
        return await self.courses.caller(self.require_user())

    async def require_admin(self, what: str):
        caller = await self.caller()
        if not caller.is_admin:
            raise web.HTTPError(403, f"Only hub admins may {what}.")
        return caller

    async def require_course_role(self, course: str, roles: tuple[str, ...], what: str):
        caller = await self.caller()
        if not caller.is_admin and caller.role_in(course) not in roles:
            who = " or ".join(f"{r}s" for r in roles) if roles else "nobody"
            raise web.HTTPError(403, f"Only hub admins and {who} of course {course} may {what}.")
        return caller


class MyWarningsHandler(CullingHandler):
    """``GET /api/culling/me``: culls pending for the caller's servers, and which are persistent."""

    async def get(self) -> None:
        caller = await self.caller()
        self.write_json(await self.culling.of_user(caller.name))


class PersistentHandler(CullingHandler):
    """``/api/culling/persistent``: GET lists marked servers; PUT marks or unmarks one (admins)."""

    async def get(self) -> None:
        await self.require_admin("list persistent servers")
        self.write_json({"servers": await self.culling.persistent()})

    async def put(self) -> None:
        caller = await self.require_admin("mark servers persistent")
        body = self.json_body()
        example = '{"user": "demo", "server_name": "", "persistent": true, "note": "open day"}'
        if not isinstance(body, dict) or not set(body) <= {"user", "server_name", "persistent", "note"}:
            raise web.HTTPError(400, f"The body must be {example}.")
        user, name = body.get("user"), body.get("server_name", "")
        persistent, note = body.get("persistent", True), body.get("note", "")
        if not isinstance(user, str) or not user or len(user) > 255:
            raise web.HTTPError(400, f"user must be a hub user name, e.g. {example}.")
        if not isinstance(name, str) or len(name) > 255:
            raise web.HTTPError(400, 'server_name must be a string ("" for the default server).')
        if not isinstance(persistent, bool):
            raise web.HTTPError(400, "persistent must be true or false.")
        if not isinstance(note, str) or len(note) > 255:
            raise web.HTTPError(400, "note must be a string of at most 255 characters.")
        await self.culling.set_persistent(caller.name, user, name, persistent, note)
        self.write_json({"user": user, "server_name": name, "persistent": persistent, "note": note})


#: The longest timeout a policy may set: 100 years (the culler adds it to datetimes, which end
#: in the year 9999; a float column would hold far more).
MAX_SECONDS = 100 * 365 * 86400


def _seconds(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or not 0 <= value <= MAX_SECONDS):
        raise web.HTTPError(400, f"{name} must be a number of seconds >= 0 (or null for the site default), "
                            f"at most {MAX_SECONDS} (100 years).")
    return float(value)


class CoursePolicyHandler(CullingHandler):
    """``/api/culling/courses/<course>/policy``: GET (members), PUT (admins) a course's policy."""

    async def get(self, course: str) -> None:
        await self.require_course_role(course, ("student", "ta", "teacher"), "see its culling policy")
        self.write_json(await self.culling.policies(course))

    async def put(self, course: str) -> None:
        caller = await self.require_admin("set a course's culling policy")
        await self.courses.get(course)  # 404 with a sentence when there is no such course
        body = self.json_body()
        example = '{"kind": "gpu", "idle_timeout": 3600, "warn_before": 600}'
        if not isinstance(body, dict) or not set(body) <= {"kind", "remove", *cm.POLICY_FIELDS}:
            raise web.HTTPError(400, f"The body must be like {example} (or {{\"kind\": \"gpu\", "
                                "\"remove\": true}); fields left out take the site default.")
        kind = body.get("kind", "")
        if kind not in cm.KINDS:
            raise web.HTTPError(400, f"kind must be one of {', '.join(repr(k) for k in cm.KINDS)} "
                                "(\"\" for every kind of the course).")
        if body.get("remove"):
            fields = None
        else:
            fields = {f: _seconds(body, f) for f in cm.POLICY_FIELDS if f != "never_cull"}
            never = body.get("never_cull")
            if never is not None and not isinstance(never, bool):
                raise web.HTTPError(400, "never_cull must be true, false or null.")
            fields["never_cull"] = never
        self.write_json(await self.culling.set_policy(caller.name, course, kind, fields))


def _time(body: dict[str, Any], name: str) -> datetime:
    value = body.get(name)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None or parsed.utcoffset() is None:
        raise web.HTTPError(400, f"{name} must be an ISO 8601 time with a zone, e.g. "
                            "\"2026-12-14T09:00:00+01:00\".")
    try:  # the year 9999 with a negative offset is past the last datetime in UTC
        utc = parsed.astimezone(timezone.utc)
    except OverflowError:
        utc = None
    if utc is None or not 1970 <= utc.year <= 9998:
        raise web.HTTPError(400, f"{name} must be a time between the years 1970 and 9998.")
    return utc


class WindowsHandler(CullingHandler):
    """``/api/culling/courses/<course>/windows``: GET (members) the windows not over yet; POST
    (teachers of the course, admins) adds one; DELETE ``{"id": N}`` cancels one."""

    async def get(self, course: str) -> None:
        await self.require_course_role(course, ("student", "ta", "teacher"), "see its no-cull windows")
        self.write_json(await self.culling.windows(course))

    async def post(self, course: str) -> None:
        caller = await self.require_course_role(course, ("teacher",), "reserve a no-cull window")
        await self.courses.get(course)
        body = self.json_body()
        example = '{"start": "2026-12-14T09:00:00+01:00", "end": "2026-12-14T12:00:00+01:00", "note": "exam"}'
        if not isinstance(body, dict) or not set(body) <= {"start", "end", "note"}:
            raise web.HTTPError(400, f"The body must be {example}.")
        start, end = _time(body, "start"), _time(body, "end")
        note = body.get("note", "")
        if end <= start:
            raise web.HTTPError(400, "end must be after start.")
        if (end - start).total_seconds() > 14 * 86400:
            raise web.HTTPError(400, "A window may last at most 14 days; mark servers persistent instead.")
        if end <= _now():
            raise web.HTTPError(400, "This window is already over; give an end in the future.")
        if not isinstance(note, str) or len(note) > 255:
            raise web.HTTPError(400, "note must be a string of at most 255 characters.")
        self.write_json(await self.culling.add_window(caller.name, course, start, end, note), 201)

    async def delete(self, course: str) -> None:
        """Cancel a window: body ``{"id": 3}`` (teachers of the course, admins)."""
        caller = await self.require_course_role(course, ("teacher",), "cancel a no-cull window")
        body = self.json_body()
        window_id = body.get("id") if isinstance(body, dict) else None
        if isinstance(window_id, bool) or not isinstance(window_id, int):
            raise web.HTTPError(400, 'The body must be {"id": 3}, the id of the window to cancel.')
        await self.culling.remove_window(caller.name, course, window_id)
        self.set_status(204)
        self.finish()



_C = r"api/culling/courses/([^/]+)"
ROUTES: list[tuple[str, type]] = [
    ("api/culling/me", MyWarningsHandler),
    ("api/culling/persistent", PersistentHandler),
    (f"{_C}/policy", CoursePolicyHandler),
    (f"{_C}/windows", WindowsHandler),
]

_OBJ = {"type": "object"}
OPENAPI_PATHS: dict[str, Any] = {
    "/api/culling/me": {
        "get": op("My pending cull warnings", "any hub user with access to classhub",
                   ok("Warnings (server, cull_at, seconds_left, message) and persistent servers", _OBJ)),
    },
    "/api/culling/persistent": {
        "get": op("Servers marked persistent", "hub admins", ok("The marked servers", _OBJ)),
        "put": op("Mark or unmark a server persistent (never culled)", "hub admins",
                   ok("The mark", _OBJ), errors=("400", "401", "403"),
                   body=json_body({"type": "object", "properties": {
                       "user": {"type": "string"}, "server_name": {"type": "string"},
                       "persistent": {"type": "boolean"}, "note": {"type": "string"}},
                       "required": ["user"]})),
    },
    "/api/culling/courses/{course}/policy": {
        "get": op("The course's culling policies per profile kind", "members of the course and hub admins",
                   ok("Policies; null fields take the site default", _OBJ), params=("course",)),
        "put": op("Set or remove the course's policy for one kind", "hub admins",
                   ok("The course's policies", _OBJ), errors=("400", "401", "403", "404"),
                   params=("course",), body=json_body({"type": "object", "properties": {
                       "kind": {"enum": list(cm.KINDS)}, "remove": {"type": "boolean"},
                       "idle_timeout": {"type": ["number", "null"]}, "max_age": {"type": ["number", "null"]},
                       "warn_before": {"type": ["number", "null"]},
                       "pressure_min_idle": {"type": ["number", "null"]},
                       "never_cull": {"type": ["boolean", "null"]}}})),
    },
    "/api/culling/courses/{course}/windows": {
        "get": op("No-cull windows of the course that are not over", "members of the course and hub admins",
                   ok("The windows", _OBJ), params=("course",)),
        "post": op("Reserve a no-cull window (e.g. an exam)", "teachers of the course and hub admins",
                    ok("The window", _OBJ, "201"), errors=("400", "401", "403", "404"), params=("course",),
                    body=json_body({"type": "object", "properties": {
                        "start": {"type": "string", "format": "date-time"},
                        "end": {"type": "string", "format": "date-time"}, "note": {"type": "string"}},
                        "required": ["start", "end"]})),
        "delete": op("Cancel a no-cull window", "teachers of the course and hub admins",
                      {"204": {"description": "Cancelled"}}, errors=("400", "401", "403", "404"),
                      params=("course",), body=json_body({"type": "object", "properties": {
                          "id": {"type": "integer"}}, "required": ["id"]})),
    },
}


