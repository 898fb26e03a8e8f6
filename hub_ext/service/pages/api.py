"""The REST endpoints the pages need beyond the rest of the API (scripts may use them too).

- ``GET /api/files?path=<folder>``: the folders and files of a folder of the caller's running
  server, read through the server's contents API with the caller's own credentials. The pages'
  folder and file pickers use it, so a template is published from, and a share names, a path
  that exists.
- ``POST /api/courses/<course>/roster/preview``: what importing this CSV would change, and every
  bad line, without changing anything (teachers, admins: the same right as importing).
- ``DELETE /api/users/<user>/server``: stop a server. Allowed to the owner, hub admins and the
  teachers of a course the owner is a student or TA of, and done with the caller's own hub
  credentials, so the hub's own check (``servers!user=<owner>``) applies too (no confused deputy).
- ``GET /api/courses/<course>/audit?offset=&limit=``: the course's audit log, newest first
  (teachers, TAs, admins); ``offset`` 0 to 2**62, ``limit`` 1 to 200; each entry with its
  sentence (hub_ext.service.pages.sentences).
- ``GET /api/my-server/progress``: the start progress of my server (the hub's event stream).
- ``GET /api/job-counts``: how many of my jobs run and wait, and for course staff those of each
  course they teach or assist; the home page asks it every few seconds.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from sqlalchemy import func, select
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from hub_ext.core import authz, bodies, roster
from hub_ext.core.jobs import ADMITTED, PREEMPTED, QUEUED, RUNNING
from hub_ext.hubapi import HubAPIError
from hub_ext.service.arguments import MAX_OFFSET, flag_argument, folder_argument, int_argument, refuse
from hub_ext.service.declare import needs
from hub_ext.service.handlers import APIHandler, roster_upload
from hub_ext.service.pages.sentences import audit_sentence
from hub_ext.store.models import AuditLog

#: Most entries one page of the audit log holds.
AUDIT_PAGE_MAX = 200
#: Job states as the home page counts them: started or starting, and waiting for room.
RUNNING_STATES = (RUNNING, ADMITTED)
WAITING_STATES = (QUEUED, PREEMPTED)


async def job_counts(settings: dict[str, Any], caller: authz.Caller) -> dict[str, Any] | None:
    """``{"mine": {"running": n, "waiting": m}, "courses": {course: {...}}}``: my jobs, and
    for each course I teach or assist all its jobs (None: no job service on this hub). Two
    grouped queries on a worker thread (docs/architecture.md, rule 7)."""
    service = settings.get("jobs")
    if service is None:
        return None
    staff = sorted(c for c, r in caller.courses.items() if r in ("teacher", "ta"))
    states = RUNNING_STATES + WAITING_STATES

    def read() -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        mine = service.store.state_counts(owner=caller.name, states=states)
        courses = service.store.state_counts(courses=staff, states=states) if staff else {}
        return mine, courses

    mine, per_course = await asyncio.to_thread(read)

    def tally(counts: dict[tuple[str, str], int], course: str | None = None) -> dict[str, int]:
        kept = {k: n for k, n in counts.items() if course is None or k[0] == course}
        return {"running": sum(n for (_, s), n in kept.items() if s in RUNNING_STATES),
                "waiting": sum(n for (_, s), n in kept.items() if s in WAITING_STATES)}

    return {"mine": tally(mine), "courses": {c: tally(per_course, c) for c in staff}}


def _caller_token(handler: APIHandler) -> str:
    """The caller's own hub token (a script's token, or the browser login's OAuth token)."""
    token = handler.hub_auth.get_token(handler)
    if not token:
        raise web.HTTPError(401, "Log in again: classhub needs your own credentials for this.")
    return token


class FilesHandler(APIHandler):
    """``GET /api/files?path=``: list a folder of my running server (hidden files left out)."""

    @needs(authz.LIST_OWN_FILES)
    async def get(self) -> None:
        path = folder_argument(self, "path", "your server")
        base = await self._server_url(self.caller.name)
        model = await self._folder(base, path)
        items = sorted(model.get("content") or [], key=lambda m: (m.get("type") != "directory",
                                                                  m.get("name", "").lower()))
        self.write_json({
            "path": path,
            "folders": [m["name"] for m in items if m.get("type") == "directory"],
            "files": [{"name": m["name"], "type": m.get("type"), "size": m.get("size")}
                      for m in items if m.get("type") != "directory"],
        })

    async def _folder(self, base: str, path: str) -> dict[str, Any]:
        """The contents model of folder `path`, asked with the caller's own credentials."""
        url = f"{base.rstrip('/')}/api/contents/{quote(path, safe='/')}?content=1&type=directory"
        client = AsyncHTTPClient()
        try:
            response = await client.fetch(url, headers={"Authorization": f"token {_caller_token(self)}"},
                                          request_timeout=60, follow_redirects=False)
        except HTTPClientError as e:
            if e.code in (401, 403):
                raise web.HTTPError(403, "Your server refused to let classhub list your files with "
                                         "your credentials; log in again.") from None
            if e.code == 404:
                raise web.HTTPError(404, f"No folder {path or '/'} in your server.") from None
            if e.code == 400:
                refuse("path", f"{path!r} in your server is a file; name a folder.")
            raise web.HTTPError(502, f"Your server answered {e.code} when classhub listed "
                                     f"{path!r}.") from None
        try:
            model = await asyncio.to_thread(bodies.parse_json, response.body, max_depth=8)
        except bodies.BodyError:
            model = None
        if not isinstance(model, dict) or model.get("type") != "directory":
            raise web.HTTPError(502, f"Your server's answer for {path!r} is not a folder listing.")
        return model

    async def _server_url(self, name: str) -> str:
        """Where `name`'s default server listens, from the hub's proxy table."""
        server = await self.hub.server(name)
        if not server or not server.get("ready"):
            raise web.HTTPError(409, "Your server is not running; start it (hub home, Start My "
                                     "Server) to pick files from it.")
        prefix = server["url"]
        routes = await self.hub.get("proxy")
        route = routes.get(prefix) or routes.get(prefix.rstrip("/"))
        if not route or (route.get("data") or {}).get("user") != name:
            raise web.HTTPError(409, "Your server has no route in the proxy yet; try again in a moment.")
        return route["target"].rstrip("/") + prefix


class RosterPreviewHandler(APIHandler):
    """``POST /api/courses/<course>/roster/preview``: what an import of this CSV would do.

    Previews take the API's usual 1 MiB (some ten thousand lines); a larger roster is imported
    without one (the page says so and offers the import)."""

    @needs(authz.IMPORT_ROSTER, course="course")
    async def post(self, course: str) -> None:
        data = roster_upload(self, "The roster is empty; choose a CSV file (username,role).")
        remove = flag_argument(self, "remove_missing")
        current = {m["username"]: m["role"] for m in await self.courses.members(course)}
        parsed = await asyncio.to_thread(roster.parse_roster, data, self.courses.normalize)
        plan = roster.diff_roster(current, parsed.rows, remove)
        self.write_json({
            "add": [{"line": r.line, "username": r.username, "role": r.role} for r in plan.adds],
            "change": [{"line": c.line, "username": c.username, "from": c.old, "to": c.new}
                       for c in plan.role_changes],
            "remove": [{"username": r.username, "role": r.role} for r in plan.removals],
            "unchanged": list(plan.unchanged),
            "protected": list(plan.protected),
            "errors": [{"line": e.line, "value": e.value, "message": e.message, "code": e.code}
                       for e in parsed.errors],
            "encoding": parsed.encoding,
        })


async def _courses_of_owner(handler: APIHandler, arguments: dict[str, Any]) -> dict[str, str]:
    """The server owner's course roles (a teacher of one where they are a student or TA may stop
    the server: hub_ext.core.authz, STOP_SERVER); asked only for a logged-in caller."""
    handler.require_user()
    return await handler.courses.roles_of(arguments["name"])


class StopServerHandler(APIHandler):
    """``DELETE /api/users/<user>/server``: stop the user's default server."""

    @needs(authz.STOP_SERVER, user="name", user_courses=_courses_of_owner)
    async def delete(self, name: str) -> None:
        headers = {"Authorization": f"token {_caller_token(self)}"}
        try:
            await self.hub.request("DELETE", f"users/{quote(name, safe='')}/server", headers=headers)
        except HubAPIError as e:
            if e.status == 403:
                raise web.HTTPError(403, f"The hub does not let you stop {name}'s server "
                                         "(your login lacks servers!user=" + name + ").") from None
            if e.status == 400:  # not running
                raise web.HTTPError(409, f"{name}'s server is not running.") from None
            raise
        self.write_json({"user": name, "stopped": True})


class AuditHandler(APIHandler):
    """``GET /api/courses/<course>/audit``: the course's audit log, newest first, paginated."""

    @needs(authz.READ_MEMBERS, course="course")
    async def get(self, course: str) -> None:
        offset = int_argument(self, "offset", 0, minimum=0, maximum=MAX_OFFSET)
        limit = int_argument(self, "limit", 50, minimum=1, maximum=AUDIT_PAGE_MAX)
        await self.courses.get(course)  # 404 for a course that does not exist (admins)
        total, rows = await asyncio.to_thread(self._read, course, offset, limit)
        self.write_json({"course": course, "total": total, "offset": offset, "limit": limit,
                         "entries": rows})

    def _read(self, course: str, offset: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
        where = AuditLog.details["course"].as_string() == course
        with self.courses.reads() as session:
            total = session.scalar(select(func.count()).select_from(AuditLog).where(where)) or 0
            found = session.scalars(select(AuditLog).where(where).order_by(AuditLog.id.desc())
                                    .offset(offset).limit(limit)).all()
            return total, [{"at": r.at.isoformat(), "actor": r.actor, "action": r.action,
                            "sentence": audit_sentence(r.actor, r.action, r.details),
                            "details": {k: v for k, v in (r.details or {}).items() if k != "course"}}
                           for r in found]


class JobCountsHandler(APIHandler):
    """``GET /api/job-counts``: my running and waiting jobs, and my courses' (staff)."""

    @needs(authz.OPEN_PAGES)  # the caller's own jobs, and the courses the caller is staff of
    async def get(self) -> None:
        counts = await job_counts(self.settings, self.caller)
        if counts is None:
            raise web.HTTPError(404, "This hub runs no job service (c.ClasshubJobs).")
        self.write_json(counts)


class ProgressHandler(APIHandler):
    """``GET /api/my-server/progress``: the spawn progress of my default server, JupyterHub's own
    event stream (``/hub/api/users/<me>/server/progress``) relayed with my own login, so the
    "starting <template>" page can follow it (the hub's stream asks for the hub's XSRF token,
    which a page of the service does not have). When the server is not starting (the hub answers
    400 or 404: still stopping, or not asked yet) the stream is one event ``{"starting": false}``
    and ends; the page asks again."""

    @needs(authz.OPEN_PAGES)  # the caller's own server, with the caller's own token
    async def get(self) -> None:
        url = f"{self.hub.api_url}/users/{quote(self.caller.name, safe='')}/server/progress"
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        status: list[int] = []

        def header(line: str) -> None:
            if not status and line.startswith("HTTP/"):
                status.append(int(line.split()[1]))

        def chunk(data: bytes) -> None:
            if status and status[0] == 200 and not self.request.connection.stream.closed():
                self.write(data)
                self.flush()

        client = AsyncHTTPClient(force_instance=True)
        try:
            await client.fetch(url, headers={"Authorization": f"token {_caller_token(self)}"},
                               header_callback=header, streaming_callback=chunk,
                               request_timeout=600, follow_redirects=False)
        except HTTPClientError as e:
            if e.code not in (400, 404, 599):
                raise web.HTTPError(502, f"The hub answered {e.code} for your server's progress.") from None
        finally:
            client.close()
        if not status or status[0] != 200:
            self.write('data: {"starting": false}\n\n')
        self.finish()
