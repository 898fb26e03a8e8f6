"""The classhub service's culling API, the culler's metrics, and the hub-page warning.

`ROUTES` (relative to the service prefix) are mounted by hub_ext.service.app; `OPENAPI_PATHS` are
merged into the OpenAPI document by hub_ext.service.openapi.document().

- ``GET /api/culling/me``: the caller's pending cull warnings (the JupyterLab extension polls it);
- ``/api/culling/persistent``: servers an admin marked persistent (GET lists, PUT marks/unmarks);
- ``/api/culling/courses/<course>/policy``: a course's own timeouts per profile kind;
- ``/api/culling/courses/<course>/windows``: no-cull windows (e.g. an exam).

The decisions themselves are made by the culler service (culler/); this module only reads and
writes what it decides from (hub_ext.store.culler_models).
"""

from __future__ import annotations

import asyncio
import functools
import html
import math
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from tornado import web

from hub_ext import store
from hub_ext.core import bodies
from hub_ext.core.culling import format_duration
from hub_ext.service import handlers
from hub_ext.service.openapi import _json_body, _ok, _op
from hub_ext.store import culler_models as cm

CULLED = "server_culled"


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


class CullingHandler(handlers.APIHandler):
    """Base: the caller as an authz Caller, and sentences for refusals."""

    @property
    def sessions(self) -> sessionmaker[Session]:
        return self.settings["sessions"]

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
        now = _now()

        def read() -> dict[str, Any]:
            with self.sessions() as session:
                warnings = [_warning_json(w, now) for w in cm.warnings_of(session, caller.name)]
                persistent = sorted(s for u, s in cm.persistent_keys(session) if u == caller.name)
            return {"user": caller.name, "warnings": warnings, "persistent": persistent}

        self.write_json(await asyncio.to_thread(read))


class PersistentHandler(CullingHandler):
    """``/api/culling/persistent``: GET lists marked servers; PUT marks or unmarks one (admins)."""

    async def get(self) -> None:
        await self.require_admin("list persistent servers")
        with self.sessions() as session:
            rows = session.scalars(select(cm.PersistentServer).order_by(
                cm.PersistentServer.username, cm.PersistentServer.server_name)).all()
            out = [{"user": r.username, "server_name": r.server_name, "marked_by": r.marked_by,
                    "marked_at": r.marked_at.isoformat(), "note": r.note} for r in rows]
        self.write_json({"servers": out})

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
        now = _now()
        with self.sessions.begin() as session:
            cm.set_persistent(session, user, name, persistent, caller.name, now, note)
            store.record(session, caller.name, "server_persistent" if persistent else "server_not_persistent",
                         now, user=user, server=name, note=note)
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
        with self.sessions() as session:
            rows = [_policy_json(r) for r in cm.course_policies(session) if r.course == course]
        self.write_json({"course": course, "policies": rows})

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
        with self.sessions.begin() as session:
            cm.set_course_policy(session, course, kind, fields)
            store.record(session, caller.name, "culling_policy_set", _now(), course=course, kind=kind,
                         policy=fields)
        with self.sessions() as session:
            rows = [_policy_json(r) for r in cm.course_policies(session) if r.course == course]
        self.write_json({"course": course, "policies": rows})


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
        with self.sessions() as session:
            rows = [_window_json(w) for w in cm.windows(session, _now(), course)]
        self.write_json({"course": course, "windows": rows})

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
        with self.sessions.begin() as session:
            window = cm.NoCullWindow(course=course, starts_at=start, ends_at=end, note=note,
                                     created_by=caller.name)
            session.add(window)
            store.record(session, caller.name, "no_cull_window_added", _now(), course=course,
                         start=start.isoformat(), end=end.isoformat(), note=note)
            session.flush()
            out = _window_json(window)
        self.write_json(out, 201)

    async def delete(self, course: str) -> None:
        """Cancel a window: body ``{"id": 3}`` (teachers of the course, admins)."""
        caller = await self.require_course_role(course, ("teacher",), "cancel a no-cull window")
        body = self.json_body()
        window_id = body.get("id") if isinstance(body, dict) else None
        if isinstance(window_id, bool) or not isinstance(window_id, int):
            raise web.HTTPError(400, 'The body must be {"id": 3}, the id of the window to cancel.')
        with self.sessions.begin() as session:
            # an id the column cannot hold names no window: the same 404 as a missing one
            row = session.get(cm.NoCullWindow, window_id) if 1 <= window_id <= bodies.DB_INT_MAX else None
            if row is None or row.course != course:
                raise web.HTTPError(404, f"No window {window_id} in course {course}; GET "
                                    f"/api/culling/courses/{course}/windows lists them.")
            session.delete(row)
            store.record(session, caller.name, "no_cull_window_removed", _now(), course=course,
                         window=window_id)
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
        "get": _op("My pending cull warnings", "any hub user with access to classhub",
                   _ok("Warnings (server, cull_at, seconds_left, message) and persistent servers", _OBJ)),
    },
    "/api/culling/persistent": {
        "get": _op("Servers marked persistent", "hub admins", _ok("The marked servers", _OBJ)),
        "put": _op("Mark or unmark a server persistent (never culled)", "hub admins",
                   _ok("The mark", _OBJ), errors=("400", "401", "403"),
                   body=_json_body({"type": "object", "properties": {
                       "user": {"type": "string"}, "server_name": {"type": "string"},
                       "persistent": {"type": "boolean"}, "note": {"type": "string"}},
                       "required": ["user"]})),
    },
    "/api/culling/courses/{course}/policy": {
        "get": _op("The course's culling policies per profile kind", "members of the course and hub admins",
                   _ok("Policies; null fields take the site default", _OBJ), params=("course",)),
        "put": _op("Set or remove the course's policy for one kind", "hub admins",
                   _ok("The course's policies", _OBJ), errors=("400", "401", "403", "404"),
                   params=("course",), body=_json_body({"type": "object", "properties": {
                       "kind": {"enum": list(cm.KINDS)}, "remove": {"type": "boolean"},
                       "idle_timeout": {"type": ["number", "null"]}, "max_age": {"type": ["number", "null"]},
                       "warn_before": {"type": ["number", "null"]},
                       "pressure_min_idle": {"type": ["number", "null"]},
                       "never_cull": {"type": ["boolean", "null"]}}})),
    },
    "/api/culling/courses/{course}/windows": {
        "get": _op("No-cull windows of the course that are not over", "members of the course and hub admins",
                   _ok("The windows", _OBJ), params=("course",)),
        "post": _op("Reserve a no-cull window (e.g. an exam)", "teachers of the course and hub admins",
                    _ok("The window", _OBJ, "201"), errors=("400", "401", "403", "404"), params=("course",),
                    body=_json_body({"type": "object", "properties": {
                        "start": {"type": "string", "format": "date-time"},
                        "end": {"type": "string", "format": "date-time"}, "note": {"type": "string"}},
                        "required": ["start", "end"]})),
        "delete": _op("Cancel a no-cull window", "teachers of the course and hub admins",
                      {"204": {"description": "Cancelled"}}, errors=("400", "401", "403", "404"),
                      params=("course",), body=_json_body({"type": "object", "properties": {
                          "id": {"type": "integer"}}, "required": ["id"]})),
    },
}


# ---- metrics (registered by hub_ext.service.metrics.registry_for) ------------------------------


class CullCollector(Collector):
    """Culls by reason and resource, and GPU-hours reclaimed, from the audit log at each scrape.

    Counted from the log, like the spawn denials: the culler is another process, and the log
    survives its restarts (see hub_ext.service.metrics).
    """

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def collect(self) -> Iterator[Metric]:
        culls = CounterMetricFamily(
            "classhub_culls", "Servers stopped by the idle culler, by reason (idle, too_old, "
            "reclaim_for_pressure) and resource (the device held, or cpu).", labels=["reason", "resource"],
        )
        hours = CounterMetricFamily(
            "classhub_culler_gpu_hours_reclaimed", "GPU-hours of idle holding ended by culls: devices "
            "held x idle time at the cull, summed (MIG slices and shares count as one device each).",
        )
        pending = GaugeMetricFamily("classhub_culler_pending_warnings", "Servers warned of a coming cull.")
        reason = store.AuditLog.details["reason"].as_string()
        resource = store.AuditLog.details["resource"].as_string()
        with self.sessions() as session:
            rows = session.execute(
                select(reason, resource, func.count()).where(store.AuditLog.action == CULLED)
                .group_by(reason, resource)
            ).all()
            gpu_hours = [
                d.get("gpu_hours", 0) for d in session.scalars(
                    select(store.AuditLog.details).where(store.AuditLog.action == CULLED))
            ]
            warned = session.scalar(select(func.count()).select_from(cm.CullWarning)) or 0
        for code, res, count in sorted(rows, key=lambda r: (str(r[0]), str(r[1]))):
            culls.add_metric([code or "unknown", res or "cpu"], count)
        hours.add_metric([], float(sum(h for h in gpu_hours if isinstance(h, int | float))))
        pending.add_metric([], warned)
        yield culls
        yield hours
        yield pending


# ---- the warning on hub pages (c.JupyterHub.template_vars["announcement"], set by configure) ---


class Announcement:
    """``template_vars`` callable: the hub page's announcement for a user with pending culls.

    JupyterHub calls it with the current user on every page render (home, spawn, token pages),
    and renders the result as HTML in its announcement bar; the message is escaped here.
    """

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url

    def __call__(self, user: Any) -> str:
        if user is None or not self.db_url:
            return ""
        try:
            with _sessions(self.db_url)() as session:
                warnings = cm.warnings_of(session, user.name)
        except Exception:  # a database hiccup must never break the hub's pages
            return ""
        now = _now()
        parts = []
        for w in warnings:
            which = f"Your server {w.server_name!r}" if w.server_name else "Your server"
            left = format_duration(max(0.0, (w.cull_at - now).total_seconds()))
            why = ("because it reached its maximum running time. Save your work."
                   if "maximum age" in w.message else
                   "because it is idle. Use it (open it, run a cell) to keep it.")
            parts.append(
                f'<span class="classhub-cull-warning">{html.escape(which)} will be stopped in about '
                f"{html.escape(left)} {why}</span>"
            )
        return "<br>".join(parts)


@functools.cache
def _sessions(url: str) -> sessionmaker[Session]:
    return store.connect(url)
