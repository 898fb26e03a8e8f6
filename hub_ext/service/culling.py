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
from datetime import datetime, timezone
from typing import Annotated, Any, ClassVar

from pydantic import ValidationInfo, WithJsonSchema, field_validator, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from tornado import web

from hub_ext import store
from hub_ext.core import authz, bodies
from hub_ext.service import body_models, handlers
from hub_ext.service.apidoc import ok, op
from hub_ext.service.declare import needs, takes
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
    """Base: the culling settings. Who may do what is each method's ``@needs`` (the culling
    rules of hub_ext.core.authz)."""

    @property
    def culling(self) -> CullingSettings:
        return self.settings["culling"]


class MyWarningsHandler(CullingHandler):
    """``GET /api/culling/me``: culls pending for the caller's servers, and which are persistent."""

    @needs(authz.READ_OWN_CULL_WARNINGS)
    async def get(self) -> None:
        self.write_json(await self.culling.of_user(self.caller.name))


class PersistentBody(body_models.Body):
    """``PUT /api/culling/persistent``: mark (or unmark) one server persistent."""

    example: ClassVar[str] = '{"user": "demo", "server_name": "", "persistent": true, "note": "open day"}'
    user: str
    server_name: str = ""
    persistent: bool = True
    note: str = ""

    @field_validator("user", mode="before")
    @classmethod
    def _user(cls, v: Any) -> str:
        return body_models.name(v, "user", cls.example)

    @field_validator("server_name", mode="before")
    @classmethod
    def _server_name(cls, v: Any) -> str:
        if not isinstance(v, str) or len(v) > 255:
            raise ValueError('server_name must be a string ("" for the default server).')
        return v

    @field_validator("persistent", mode="before")
    @classmethod
    def _persistent(cls, v: Any) -> bool:
        return bool(body_models.flag(v, "persistent"))

    @field_validator("note", mode="before")
    @classmethod
    def _note(cls, v: Any) -> str:
        return body_models.short_text(v, "note")


class PolicyBody(body_models.Body):
    """``PUT /api/culling/courses/<c>/policy``: a course's timeouts for one kind of profile;
    fields left out take the site default; ``remove`` drops the course's own policy."""

    example: ClassVar[str] = ('{"kind": "gpu", "idle_timeout": 3600, "warn_before": 600} (or {"kind": '
                              '"gpu", "remove": true}); fields left out take the site default')
    kind: Annotated[str, WithJsonSchema({"enum": list(cm.KINDS), "default": ""})] = ""
    remove: bool = False
    idle_timeout: float | None = None
    max_age: float | None = None
    warn_before: float | None = None
    pressure_min_idle: float | None = None
    never_cull: bool | None = None

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, v: Any) -> str:
        if v not in cm.KINDS:
            raise ValueError(f"kind must be one of {', '.join(repr(k) for k in cm.KINDS)} "
                             "(\"\" for every kind of the course).")
        return v

    @field_validator("idle_timeout", "max_age", "warn_before", "pressure_min_idle", mode="before")
    @classmethod
    def _seconds(cls, v: Any, info: ValidationInfo) -> float | None:
        return body_models.seconds(v, info.field_name)

    @field_validator("never_cull", "remove", mode="before")
    @classmethod
    def _flags(cls, v: Any, info: ValidationInfo) -> bool | None:
        return body_models.flag(v, info.field_name, null_ok=info.field_name == "never_cull")

    def fields(self) -> dict[str, Any] | None:
        """The policy's fields for the store, or None to remove the course's policy."""
        return None if self.remove else {f: getattr(self, f) for f in cm.POLICY_FIELDS}


class WindowBody(body_models.Body):
    """``POST /api/culling/courses/<c>/windows``: a no-cull window (at most 14 days, not over)."""

    example: ClassVar[str] = ('{"start": "2026-12-14T09:00:00+01:00", "end": "2026-12-14T12:00:00+01:00", '
                              '"note": "exam"}')
    start: datetime
    end: datetime
    note: str = ""

    @field_validator("start", "end", mode="before")
    @classmethod
    def _instant(cls, v: Any, info: ValidationInfo) -> datetime:
        return body_models.instant(v, info.field_name)

    @field_validator("note", mode="before")
    @classmethod
    def _note(cls, v: Any) -> str:
        return body_models.short_text(v, "note")

    @model_validator(mode="after")
    def _span(self) -> WindowBody:
        if self.end <= self.start:
            raise ValueError("end must be after start.")
        if (self.end - self.start).total_seconds() > 14 * 86400:
            raise ValueError("A window may last at most 14 days; mark servers persistent instead.")
        if self.end <= _now():
            raise ValueError("This window is already over; give an end in the future.")
        return self


class WindowIdBody(body_models.Body):
    """``DELETE /api/culling/courses/<c>/windows``: which window to cancel."""

    example: ClassVar[str] = '{"id": 3}, the id of the window to cancel'
    id: int

    @field_validator("id", mode="before")
    @classmethod
    def _id(cls, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"The body must be {cls.example}.")
        return v


class PersistentHandler(CullingHandler):
    """``/api/culling/persistent``: GET lists marked servers; PUT marks or unmarks one (admins)."""

    @needs(authz.READ_PERSISTENT)
    async def get(self) -> None:
        self.write_json({"servers": await self.culling.persistent()})

    @needs(authz.MARK_PERSISTENT)
    @takes(PersistentBody)
    async def put(self) -> None:
        body = self.body
        await self.culling.set_persistent(self.caller.name, body.user, body.server_name,
                                          body.persistent, body.note)
        self.write_json(body.model_dump())


class CoursePolicyHandler(CullingHandler):
    """``/api/culling/courses/<course>/policy``: GET (members), PUT (admins) a course's policy."""

    @needs(authz.READ_CULL_POLICY, course="course")
    async def get(self, course: str) -> None:
        self.write_json(await self.culling.policies(course))

    @needs(authz.SET_CULL_POLICY)
    @takes(PolicyBody)
    async def put(self, course: str) -> None:
        await self.courses.get(course)  # 404 with a sentence when there is no such course
        self.write_json(await self.culling.set_policy(self.caller.name, course, self.body.kind,
                                                      self.body.fields()))


class WindowsHandler(CullingHandler):
    """``/api/culling/courses/<course>/windows``: GET (members) the windows not over yet; POST
    (teachers of the course, admins) adds one; DELETE ``{"id": N}`` cancels one."""

    @needs(authz.READ_CULL_WINDOWS, course="course")
    async def get(self, course: str) -> None:
        self.write_json(await self.culling.windows(course))

    @needs(authz.EDIT_CULL_WINDOWS, course="course")
    @takes(WindowBody)
    async def post(self, course: str) -> None:
        await self.courses.get(course)
        body = self.body
        self.write_json(await self.culling.add_window(self.caller.name, course, body.start, body.end,
                                                      body.note), 201)

    @needs(authz.EDIT_CULL_WINDOWS, course="course")
    @takes(WindowIdBody)
    async def delete(self, course: str) -> None:
        """Cancel a window: body ``{"id": 3}`` (teachers of the course, admins)."""
        await self.culling.remove_window(self.caller.name, course, self.body.id)
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
#: What no signature shows; each JSON body's schema comes from its model (``@takes``).
OPENAPI_PATHS: dict[str, Any] = {
    "/api/culling/me": {
        "get": op("My pending cull warnings", "any hub user with access to classhub",
                   ok("Warnings (server, cull_at, seconds_left, message) and persistent servers", _OBJ)),
    },
    "/api/culling/persistent": {
        "get": op("Servers marked persistent", "hub admins", ok("The marked servers", _OBJ)),
        "put": op("Mark or unmark a server persistent (never culled)", "hub admins",
                   ok("The mark", _OBJ), errors=("400", "401", "403")),
    },
    "/api/culling/courses/{course}/policy": {
        "get": op("The course's culling policies per profile kind", "members of the course and hub admins",
                   ok("Policies; null fields take the site default", _OBJ), params=("course",)),
        "put": op("Set or remove the course's policy for one kind", "hub admins",
                   ok("The course's policies", _OBJ), errors=("400", "401", "403", "404"),
                   params=("course",)),
    },
    "/api/culling/courses/{course}/windows": {
        "get": op("No-cull windows of the course that are not over", "members of the course and hub admins",
                   ok("The windows", _OBJ), params=("course",)),
        "post": op("Reserve a no-cull window (e.g. an exam)", "teachers of the course and hub admins",
                    ok("The window", _OBJ, "201"), errors=("400", "401", "403", "404"), params=("course",)),
        "delete": op("Cancel a no-cull window", "teachers of the course and hub admins",
                      {"204": {"description": "Cancelled"}}, errors=("400", "401", "403", "404"),
                      params=("course",)),
    },
}
