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
  (teachers, TAs, admins); ``offset`` 0 to 2**62, ``limit`` 1 to 200.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from sqlalchemy import func, select
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from hub_ext.core import authz, bodies, roster
from hub_ext.hubapi import HubAPIError
from hub_ext.service.arguments import MAX_OFFSET, int_argument
from hub_ext.service.handlers import APIHandler
from hub_ext.store.models import AuditLog

#: Most entries one page of the audit log holds.
AUDIT_PAGE_MAX = 200


def _caller_token(handler: APIHandler) -> str:
    """The caller's own hub token (a script's token, or the browser login's OAuth token)."""
    token = handler.hub_auth.get_token(handler)
    if not token:
        raise web.HTTPError(401, "Log in again: classhub needs your own credentials for this.")
    return token


class FilesHandler(APIHandler):
    """``GET /api/files?path=``: list a folder of my running server (hidden files left out)."""

    async def get(self) -> None:
        caller = await self.authorize(authz.READ_OWN_USAGE)
        path = self.get_query_argument("path", "").strip("/")
        if any(part in ("", ".", "..") for part in path.split("/")) and path:
            raise web.HTTPError(400, "path must be a folder inside your server, without '..'.")
        base = await self._server_url(caller.name)
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
                raise web.HTTPError(400, f"{path!r} in your server is a file; name a folder.") from None
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

    async def post(self, course: str) -> None:
        await self.authorize(authz.IMPORT_ROSTER, course=course)
        if self.request.headers.get("Content-Type", "").split(";")[0].strip().lower() == "application/json":
            raise web.HTTPError(400, "A roster is a CSV file (username,role); send it as the body "
                                "(Content-Type text/csv) or in the multipart field \"file\", not JSON.")
        files = self.request.files.get("file")
        data = files[0]["body"] if files else self.request.body
        if not data:
            raise web.HTTPError(400, "The roster is empty; choose a CSV file (username,role).")
        flag = self.get_query_argument("remove_missing", "false").lower()
        if flag not in ("true", "false", "1", "0", "yes", "no"):
            raise web.HTTPError(400, "remove_missing must be true or false.")
        current = {m["username"]: m["role"] for m in await self.courses.members(course)}
        parsed = await asyncio.to_thread(roster.parse_roster, data, self.courses.normalize)
        plan = roster.diff_roster(current, parsed.rows, flag in ("true", "1", "yes"))
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


class StopServerHandler(APIHandler):
    """``DELETE /api/users/<user>/server``: stop the user's default server."""

    async def delete(self, name: str) -> None:
        caller = await self.courses.caller(self.require_user())
        if not (caller.is_admin or caller.name == name or await self._teaches(caller, name)):
            raise web.HTTPError(403, f"You can stop your own server, and as a teacher the servers "
                                     f"of your course's students and TAs; not {name}'s.")
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

    async def _teaches(self, caller: authz.Caller, name: str) -> bool:
        for course, role in caller.courses.items():
            if role != "teacher":
                continue
            members = {m["username"]: m["role"] for m in await self.courses.members(course)}
            if members.get(name) in ("student", "ta"):
                return True
        return False


class AuditHandler(APIHandler):
    """``GET /api/courses/<course>/audit``: the course's audit log, newest first, paginated."""

    async def get(self, course: str) -> None:
        await self.authorize(authz.READ_MEMBERS, course=course)
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
                            "details": {k: v for k, v in (r.details or {}).items() if k != "course"}}
                           for r in found]
