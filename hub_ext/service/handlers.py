"""REST handlers of the classhub service. Thin: identify the caller, ask core, answer JSON."""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.services.auth import HubOAuthenticated, UserNotAllowed
from tornado import web

from hub_ext import __version__
from hub_ext.core import roles
from hub_ext.service import servers
from hub_ext.service.hubapi import HubAPI


class APIHandler(HubOAuthenticated, web.RequestHandler):
    """Base for API handlers: JSON errors, and 401/403 instead of redirects for API clients."""

    @property
    def hub(self) -> HubAPI:
        return self.settings["hub_api"]

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
    """``GET /api/me``: who the caller is, their groups and their classhub role."""

    async def get(self) -> None:
        caller = self.require_user()
        if caller.get("kind", "user") != "user":
            self.write_json({"name": caller["name"], "kind": caller["kind"], "groups": [],
                             "role": None, "courses": {}})
            return
        user = await self.hub.user(caller["name"])
        courses = {
            g["name"]: staff
            for g in await self.hub.groups()
            if (staff := roles.CourseStaff.from_group_properties(g.get("properties"))) is not None
        }
        in_courses = roles.course_roles(user["name"], user.get("groups", []), courses)
        self.write_json(
            {
                "name": user["name"],
                "kind": "user",
                "admin": bool(user.get("admin")),
                "groups": sorted(user.get("groups", [])),
                "role": roles.overall_role(bool(user.get("admin")), in_courses),
                "courses": in_courses,
            }
        )


class ServerProfileHandler(APIHandler):
    """``PUT /api/users/<name>/server/profile``: restart the server with other options.

    Body: the new ``user_options`` (e.g. ``{"profile": "h200-mig-1g"}``). The home is kept; if the
    hub refuses the options, the server comes back with its old ones and the refusal is returned.
    """

    async def put(self, name: str) -> None:
        caller = self.require_user()
        if not roles.may_control_server(caller["name"], bool(caller.get("admin")), name):
            raise web.HTTPError(403, "You can only change the profile of your own server.")
        try:
            options = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, 'The body must be JSON user_options, e.g. {"profile": "cpu"}') from None
        if not isinstance(options, dict):
            raise web.HTTPError(400, "The body must be a JSON object of user_options.")
        server = await servers.switch_profile(self.hub, name, options)
        self.write_json({"user_options": server.get("user_options"), "ready": server.get("ready"),
                         "url": server.get("url")})


class NotFoundHandler(APIHandler):
    """Unknown API paths answer JSON 404 rather than an HTML page."""

    def prepare(self) -> None:
        raise web.HTTPError(404, f"No such classhub API endpoint: {self.request.path}")
