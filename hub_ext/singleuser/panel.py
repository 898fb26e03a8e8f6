"""The JupyterLab panel's server side: ``<base_url>api/classhub/panel/...`` in every server.

Why the panel talks to its own server rather than to the classhub service: the browser then
never holds a hub token (its cookie for this server is all it has), and the server knows who
is looking (the hub says so, for every request). The rule it keeps: **it acts as the person
looking, never lends the owner's power to a visitor.**

- The owner: requests are relayed to the classhub service with this server's own token (the
  owner's, made by the hub for this server), so the service decides exactly as for the owner's
  own API calls. Only the paths in `RELAYED` are relayed.
- Anyone else (a TA at a student's shared notebook): the state says who owns the server and how
  it is shared (read-only or editable), nothing of the owner's account; every relay is refused
  (403 with a sentence). A viewer's one action is "copy to my server": the service reads the file
  with the *viewer's* token and writes it into the viewer's own server (hub_ext.service.panel).

Routes (authenticated like every jupyter-server API: the cookie and ``_xsrf`` of this server):

- ``GET  api/classhub/panel/state``: who looks, the server, and for the owner: courses, quota
  use, templates, open assignments, shares, shares with me, pending cull warnings, jobs, storage
  (the home's size against its limit, the courses' data folders) (``?parts=viewer``: who looks
  and the server only);
- ``GET|POST|PUT|DELETE api/classhub/panel/service/<path>``: the owner's relay to the service;
  a text answer (a job's log) comes back as text; a log is read from ``offset``, never followed
  (the panel reads again what is new);
- ``POST api/classhub/panel/keep``: "keep running" (the owner): tells the hub this server is in
  use now, which is what the idle culler reads;
- ``POST api/classhub/panel/copy`` ``{"path": "week1.ipynb"}``: a viewer's copy to their server;
- ``POST api/classhub/panel/predictions`` ``{"course": ..., "competition": ..., "path": "out.csv"}``:
  the owner submits a predictions file of this server to a competition: the server reads the file
  and relays it as the CSV upload the service scores (docs/teachers/competitions.md), so the
  browser never downloads and re-uploads it (docs/teachers/lab-panel.md); a ``.ipynb`` path (the
  open notebook) is relayed as a notebook submission, which runs as a job and writes the file.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import ensure_async, url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from hub_ext.core import sharing

ROUTE = "api/classhub/panel"

#: What the owner's panel may ask the service, per method (paths under the service's ``api/``).
RELAYED: dict[str, tuple[re.Pattern[str], ...]] = {
    "GET": tuple(re.compile(p) for p in (
        r"me", r"usage/me", r"shares", r"shares/with-me", r"culling/me", r"storage/me",
        r"courses/[^/]+/templates", r"courses/[^/]+/usage", r"jobs", r"jobs/[^/]+", r"jobs/[^/]+/logs",
        r"courses/[^/]+/assignments", r"courses/[^/]+/competitions",
    )),
    "POST": tuple(re.compile(p) for p in (
        r"shares", r"courses/[^/]+/templates/[^/]+/start", r"courses/[^/]+/templates/[^/]+/versions",
        r"jobs", r"jobs/[^/]+/cancel", r"courses/[^/]+/assignments/[^/]+/submissions",
    )),
    "PUT": (),
    "DELETE": tuple(re.compile(p) for p in (r"shares/[0-9]+",)),
}

VIEWER_REFUSAL = ("This panel acts only for the owner of this server; you are looking at a server "
                  "shared with you. Open your own server to share, start templates or see your quota.")


def relayable(method: str, path: str) -> bool:
    """Whether the owner's panel may send ``method path`` to the service (see `RELAYED`)."""
    if any(part in (".", "..") for part in path.split("/")):
        return False
    return any(p.fullmatch(path) for p in RELAYED.get(method, ()))


def _payload(raw: bytes) -> Any:
    """A service answer as JSON (a text one as ``{"message": ...}``)."""
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return {"message": raw.decode(errors="replace")[:500]}


def _started() -> str:
    """When this server process started (ISO 8601): the panel's "running for"."""
    try:
        import psutil

        created = psutil.Process(os.getpid()).create_time()
    except Exception:  # psutil missing or the process table unreadable: now is close enough
        created = time.time()
    return datetime.fromtimestamp(created, timezone.utc).isoformat()


class PanelHandler(APIHandler):
    """Base: who looks (owner or not), and calls to the classhub service."""

    @property
    def hub_auth(self) -> Any:
        return self.identity_provider.hub_auth

    @property
    def service_api(self) -> str:
        return os.environ.get("CLASSHUB_SERVICE_API_URL", "").rstrip("/")

    @property
    def owner(self) -> str:
        return os.environ.get("JUPYTERHUB_USER", "")

    def viewer_name(self) -> str:
        return self.current_user.hub_user.get("name", "")

    async def level(self) -> str:
        """owner, edit, read-only or none (hub_ext.core.sharing), from the server's Authorizer."""
        authorizer = self.authorizer
        if hasattr(authorizer, "access_level"):
            return await authorizer.access_level(self)
        return sharing.OWNER if self.viewer_name() == self.owner else sharing.NONE

    def require_owner(self) -> None:
        hub_user = self.current_user.hub_user
        if hub_user.get("kind", "user") != "user" or hub_user.get("name") != self.owner:
            raise web.HTTPError(403, VIEWER_REFUSAL)

    async def service(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        """Call the classhub service (``<api>/<path>``) with this server's token: status, JSON."""
        code, raw, _ = await self.service_raw(method, path, body)
        return code, _payload(raw)

    async def service_raw(self, method: str, path: str, body: bytes | None = None,
                          content_type: str = "application/json") -> tuple[int, bytes, str]:
        """Call the classhub service: status, the answer's bytes and its Content-Type."""
        if not self.service_api:
            raise web.HTTPError(503, "This server does not know the classhub service "
                                     "(CLASSHUB_SERVICE_API_URL is not set).")
        headers = {"Authorization": f"token {self.hub_auth.api_token}"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            answer = await AsyncHTTPClient().fetch(
                f"{self.service_api}/{path}", method=method, headers=headers, request_timeout=60,
                body=body if body is not None else (b"" if method in ("POST", "PUT") else None),
                allow_nonstandard_methods=True, follow_redirects=False)
        except HTTPClientError as e:
            if e.response is None:
                raise web.HTTPError(502, f"The classhub service did not answer: {e}.") from None
            answer = e.response
        except OSError as e:
            raise web.HTTPError(502, f"The classhub service cannot be reached: {e}.") from None
        return answer.code, answer.body or b"", answer.headers.get("Content-Type", "")

    def answer(self, status: int, payload: Any) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(payload))


class StateHandler(PanelHandler):
    """``GET api/classhub/panel/state``: everything the panel shows, for the person looking."""

    @web.authenticated
    async def get(self) -> None:
        level = await self.level()
        viewer = self.viewer_name()
        server = {"name": os.environ.get("JUPYTERHUB_SERVER_NAME", ""),
                  "profile": os.environ.get("CLASSHUB_PROFILE") or None,
                  "gpus": os.environ.get("CUDA_VISIBLE_DEVICES") or None,
                  "started": _started()}
        state: dict[str, Any] = {
            "viewer": {"name": viewer, "owner": level == sharing.OWNER,
                       "access": {sharing.OWNER: "owner", sharing.EDIT: "edit"}.get(level, "read-only")},
            "owner": self.owner,
            "server": server,
            "hub_prefix": os.environ.get("JUPYTERHUB_BASE_URL", "/").rstrip("/") + "/hub/",
        }
        # ?parts=viewer: who looks, at once (JupyterLab waits for it before opening documents)
        if level != sharing.OWNER or self.get_argument("parts", "") == "viewer":
            self.answer(200, state)  # a visitor sees nothing of the owner's account
            return
        mine = quote(self.owner, safe="")
        parts = {"me": "me", "usage": "usage/me", "shares": "shares", "shared_with_me": "shares/with-me",
                 "culling": "culling/me", "jobs": f"jobs?owner={mine}&limit=20", "storage": "storage/me"}
        answers = await asyncio.gather(*(self.service("GET", p) for p in parts.values()))
        errors = []
        for key, (code, payload) in zip(parts, answers, strict=True):
            if key in ("jobs", "storage") and code == 404:  # a classhub without it: no section
                continue
            if code == 200:
                # lists of shares and jobs come wrapped ({"shares": [...]}): the panel takes the list
                inner = "jobs" if key == "jobs" else "shares"
                wrapped = isinstance(payload, dict) and inner in payload
                state[key] = payload[inner] if wrapped else payload
            else:
                errors.append((payload or {}).get("message") or f"{parts[key]}: {code}")
        courses = (state.get("me") or {}).get("courses") or {}
        state["courses"] = courses
        listed = await asyncio.gather(*(self.service("GET", f"courses/{quote(c, safe='')}/{what}")
                                        for what in ("templates", "assignments", "competitions")
                                        for c in courses))
        templates, assignments, competitions = [], [], []
        for course, (code, payload) in zip(courses, listed[:len(courses)], strict=True):
            if code == 200:
                items = payload.get("templates", payload) if isinstance(payload, dict) else payload
                for t in items or []:
                    templates.append({"course": course, **t})
        for code, payload in listed[len(courses):2 * len(courses)]:  # each assignment names its course
            if code == 200 and isinstance(payload, list):
                assignments.extend(payload)
        for code, payload in listed[2 * len(courses):]:  # so does each competition
            if code == 200 and isinstance(payload, list):
                competitions.extend(payload)
        state["templates"] = templates
        state["assignments"] = assignments
        state["competitions"] = competitions
        state["errors"] = errors
        self.answer(200, state)


class RelayHandler(PanelHandler):
    """``api/classhub/panel/service/<path>``: the owner's panel calling the classhub service."""

    async def _relay(self, path: str) -> None:
        self.require_owner()
        method = self.request.method.upper()
        if not relayable(method, path):
            raise web.HTTPError(404, f"The panel does not relay {method} {path} to classhub.")
        query = self.request.query
        if path.endswith("/logs"):  # a log is read from an offset; following would hold the relay
            query = urlencode([(k, v) for k, v in parse_qsl(query, keep_blank_values=True)
                               if k != "follow"])
        body = (self.request.body or b"{}") if method in ("POST", "PUT") else None
        target = path + (f"?{query}" if query else "")
        code, raw, content_type = await self.service_raw(method, target, body)
        if code == 200 and content_type.startswith("text/plain"):
            self.set_status(code)
            self.set_header("Cache-Control", "no-store")
            self.finish(raw, set_content_type=content_type)
            return
        self.answer(code, _payload(raw))

    @web.authenticated
    async def get(self, path: str) -> None:
        await self._relay(path)

    @web.authenticated
    async def post(self, path: str) -> None:
        await self._relay(path)

    @web.authenticated
    async def delete(self, path: str) -> None:
        await self._relay(path)


class KeepHandler(PanelHandler):
    """``POST api/classhub/panel/keep``: "keep running": tell the hub this server is used now.

    The idle culler decides from the hub's ``last_activity``; jupyterhub-singleuser reports it
    only every few minutes, so the report is sent at once (with this server's token, which has
    ``users:activity!user``), and the server's own activity is marked too.
    """

    @web.authenticated
    async def post(self) -> None:
        self.require_owner()
        now = datetime.now(timezone.utc)
        self.settings["classhub_keep_last_activity"] = now
        stamp = now.isoformat().replace("+00:00", "Z")
        server = os.environ.get("JUPYTERHUB_SERVER_NAME", "")
        body = json.dumps({"last_activity": stamp, "servers": {server: {"last_activity": stamp}}})
        try:
            await AsyncHTTPClient().fetch(
                f"{self.hub_auth.api_url}/users/{quote(self.owner, safe='')}/activity", method="POST",
                body=body, request_timeout=20, headers={"Authorization": f"token {self.hub_auth.api_token}",
                                                        "Content-Type": "application/json"})
        except Exception as e:
            raise web.HTTPError(502, f"The hub did not take the activity report ({e}); use the server "
                                     "(run a cell) to keep it.") from None
        self.answer(200, {"kept": True, "last_activity": stamp})


class CopyHandler(PanelHandler):
    """``POST api/classhub/panel/copy`` ``{"path": ...}``: a viewer's own editable copy.

    Allowed to read-only viewers (it changes nothing in this server, so the Authorizer's check
    of state-changing requests lets it through; see ``classhub_changes_nothing_here``).
    """

    classhub_changes_nothing_here = True

    @web.authenticated
    async def post(self) -> None:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("path"), str) or not body["path"].strip("/"):
            raise web.HTTPError(400, 'Send {"path": "week1.ipynb"}: the file to copy to your server.')
        level = await self.level()
        if level == sharing.OWNER:
            raise web.HTTPError(400, "This is your own server; the file is already yours to edit.")
        if level == sharing.NONE:
            raise web.HTTPError(403, "This server is not shared with you.")
        payload = json.dumps({"viewer_token": self.hub_auth.get_token(self) or "",
                              "server": os.environ.get("JUPYTERHUB_SERVER_NAME", ""),
                              "path": body["path"].strip("/")}).encode()
        code, answer = await self.service("POST", "panel/copy", payload)
        self.answer(code, answer)


class PredictionsHandler(PanelHandler):
    """``POST api/classhub/panel/predictions``: the owner submits a CSV file of this server to a
    competition, or a notebook (``.ipynb``: it runs as a job and writes the predictions file);
    the answer is the service's (the scored or pending submission, or its sentence)."""

    @web.authenticated
    async def post(self) -> None:
        self.require_owner()
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            body = None
        names = ("course", "competition", "path")
        if not isinstance(body, dict) or not all(isinstance(body.get(k), str) and body[k].strip("/")
                                                 for k in names):
            raise web.HTTPError(400, 'Send {"course": "demo101", "competition": "digits", "path": '
                                     '"predictions.csv"}: the competition and the CSV file to submit.')
        path = body["path"].strip("/")
        try:
            model = await ensure_async(self.contents_manager.get(path, content=True, format="text",
                                                                 type="file"))
        except web.HTTPError as e:
            raise web.HTTPError(400, f"{path} cannot be read as a text file of this server "
                                     f"({e.log_message}); pick the CSV file of your predictions.") from None
        notebook = path.lower().endswith(".ipynb")
        target = (f"courses/{quote(body['course'], safe='')}/competitions/"
                  f"{quote(body['competition'], safe='')}/{'notebooks' if notebook else 'submissions'}")
        code, raw, _ = await self.service_raw("POST", target, model["content"].encode(),
                                              "application/x-ipynb+json" if notebook else "text/csv")
        self.answer(code, _payload(raw))


def setup(serverapp: Any) -> None:
    """Register the panel's routes with the server."""
    base_url = serverapp.web_app.settings["base_url"]
    prefix = url_path_join(base_url, ROUTE)
    serverapp.web_app.add_handlers(".*$", [
        (url_path_join(prefix, "state"), StateHandler),
        (url_path_join(prefix, "service", "(.*)"), RelayHandler),
        (url_path_join(prefix, "keep"), KeepHandler),
        (url_path_join(prefix, "copy"), CopyHandler),
        (url_path_join(prefix, "predictions"), PredictionsHandler),
    ])
